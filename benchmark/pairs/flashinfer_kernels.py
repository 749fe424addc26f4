"""FlashInfer's kernels for the project's lent GPU host: built on a CPU host, checked on the GPU.

The kit's flashinfer wheel drops the vendored CCCL that FlashInfer's JIT builds need, so the GPU
host cannot build them, and where it can a fresh host pays minutes of its session for them. The
kit therefore carries them, built here for every model shape a plan runs, as FlashInfer's AOT
directory packed in .gpu/flashinfer-aot.tar.xz (gpu_job.sh installs it).

    python benchmark/flashinfer_kernels.py build .gpu/flashinfer-aot.tar.xz --shapes 1b 8b
        On any x86-64 host with CUDA 13.0's nvcc and the full flashinfer wheel (the project's
        .venv; no GPU needed): the kernels SGLang's FlashInfer backend loads for each model shape,
        compiled for the H200 (sm_90a).
    python3 benchmark/flashinfer_kernels.py probe 1b
        On the GPU host, with the JIT disabled: each of those kernels at that shape, once,
        against PyTorch. Exits 1 naming what failed.
"""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from benchmark.pairs.carried_kernels import attention_reference, command_line, run_checks
from benchmark.pairs.design import SHAPES, head_dim

H200_ARCH = "9.0a"
# For the pair's servers, gated and plain, the GPU host's JIT built FlashInfer's batch-prefill
# module in its FA2 and sm90 ("fa3") builds and no decode module: at 4 query heads per KV head
# SGLang decodes on the prefill kernels too.
ATTENTION_BACKENDS = ("fa2", "fa3")


def attention_spec(backend: str, dim: int):
    import torch
    from flashinfer.jit.attention.modules import gen_batch_prefill_module

    return gen_batch_prefill_module(backend, torch.bfloat16, torch.bfloat16, torch.bfloat16,
                                    torch.int32, dim, dim, 0, False, False, False)


def shape_independent_specs():
    """The other modules that JIT build held. Sampling, which EAGLE's sampled verification loads,
    is left to the JIT, which builds it without the CCCL: with it, the kit would pass the 64 MiB a
    device call carries."""
    from flashinfer.jit.cascade import gen_cascade_module
    from flashinfer.jit.norm import gen_norm_module
    from flashinfer.jit.quantization import gen_quantization_module

    return [gen_cascade_module(), gen_norm_module(), gen_quantization_module()]


def cpu_host_build_env(cuda_home: Path, scratch: Path) -> dict[str, str]:
    """What a CPU host lacks for FlashInfer's builds, in environment variables:
    - the headers of CUDA libraries that a compiler-only toolkit leaves out (curand, cublasLt),
      taken from the nvidia wheels that torch installed;
    - ``libcuda.so`` for the link, which names it although the kernels call only the runtime
      (the GPU host's builds need only libcudart.so.13): an empty stub where no driver is installed."""
    import nvidia

    headers = scratch / "include"
    headers.mkdir()
    for wheel_include in (include for base in nvidia.__path__ for include in Path(base).glob("*/include")):
        for header in wheel_include.glob("*.h"):
            if not (cuda_home / "include" / header.name).exists() and not (headers / header.name).exists():
                (headers / header.name).symlink_to(header)
    env = {"CUDA_HOME": str(cuda_home), "FLASHINFER_CUDA_ARCH_LIST": H200_ARCH,
           "FLASHINFER_WORKSPACE_BASE": str(scratch),
           "CPATH": os.pathsep.join(filter(None, [str(headers), os.environ.get("CPATH")]))}
    if not (cuda_home / "lib64/stubs/libcuda.so").exists():
        stub = scratch / "stubs"
        stub.mkdir()
        (stub / "empty.c").write_text("")
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so"), str(stub / "empty.c")],
                       check=True)
        env["LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(stub), os.environ.get("LIBRARY_PATH")]))
    return env


def build(archive: Path, shapes: list[str], cuda_home: Path) -> None:
    partial = archive.with_name(archive.name + ".partial")  # a failed build keeps the old archive
    with tempfile.TemporaryDirectory(prefix="flashinfer-kernels-") as scratch:
        # FlashInfer reads its workspace and target architectures at import: set them first.
        os.environ.update(cpu_host_build_env(cuda_home, Path(scratch)))
        specs = shape_independent_specs() + [
            attention_spec(backend, dim)
            for dim in sorted({head_dim(SHAPES[shape]) for shape in shapes}) for backend in ATTENTION_BACKENDS]
        with tarfile.open(partial, "w:xz") as tar:  # laid out as FlashInfer's AOT directory
            for spec in specs:
                print(f"building {spec.name}", flush=True)
                spec.build(verbose=False)
                tar.add(spec.jit_library_path, arcname=f"{spec.name}/{spec.name}.so")
    partial.replace(archive)
    print(f"wrote {archive}: {len(specs)} modules for shapes {', '.join(shapes)}")


def probe_attention(shape: str, backend: str) -> float:
    """The largest difference from PyTorch of a paged and a ragged causal prefill of two requests,
    one with a cached prefix, at SGLang's page size of 1."""
    import flashinfer
    import torch

    dims = SHAPES[shape]
    dim = head_dim(dims)
    heads, kv_heads = dims["num_attention_heads"], dims["num_key_value_heads"]
    qo_lens, kv_lens = [7, 33], [40, 33]
    qo_indptr, kv_indptr = (torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32, device="cuda")
                            for lens in (qo_lens, kv_lens))
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(sum(qo_lens), heads, dim, generator=gen, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(kv_lens), kv_heads, dim, generator=gen, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))
    expected = attention_reference(q, k, v, qo_indptr.tolist(), kv_indptr.tolist())
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    common = dict(causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)

    paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=backend)
    paged.plan(qo_indptr, kv_indptr, torch.arange(sum(kv_lens), dtype=torch.int32, device="cuda"),
               torch.ones(len(kv_lens), dtype=torch.int32, device="cuda"), heads, kv_heads, dim, 1, **common)
    paged_out = paged.run(q, torch.stack([k, v], dim=1).unsqueeze(2))  # [page, K/V, 1, head, dim]

    ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD", backend=backend)
    ragged.plan(qo_indptr, kv_indptr, heads, kv_heads, dim, **common)
    ragged_out = ragged.run(q, k, v)
    return max((out.float() - expected).abs().max().item() for out in (paged_out, ragged_out))


def packbits_reference(bits):
    """numpy.packbits(bits, bitorder="big"), which FlashInfer's packbits follows: the first of each
    8 bits is the byte's highest."""
    import torch

    return (bits.view(-1, 8).int() << torch.arange(7, -1, -1, device=bits.device)).sum(-1)


def probe_shape_independent() -> float:
    """The largest difference of an RMSNorm, a bit packing and a merge of a state with itself
    (which leaves its values as they were) from what they should give."""
    import flashinfer
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(4, 256, generator=gen, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(256, generator=gen, device="cuda", dtype=torch.bfloat16)
    norm_expected = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * weight.float()
    norm_error = (flashinfer.norm.rmsnorm(x, weight, eps=1e-6).float() - norm_expected).abs().max().item()

    bits = torch.rand(64, generator=gen, device="cuda") > 0.5
    pack_error = (flashinfer.quantization.packbits(bits, "big").int() - packbits_reference(bits)).abs().max().item()

    values = torch.randn(5, 4, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
    lse = torch.randn(5, 4, generator=gen, device="cuda", dtype=torch.float32)
    merged, _ = flashinfer.cascade.merge_state(values, lse, values, lse)
    merge_error = (merged.float() - values.float()).abs().max().item()
    return max(norm_error, float(pack_error), merge_error)


def probe(shape: str) -> int:
    os.environ["FLASHINFER_DISABLE_JIT"] = "1"  # a kernel the AOT directory lacks raises, not builds
    os.environ["FLASHINFER_USE_CUDA_NORM"] = "1"  # RMSNorm from the norm module, not CuTe DSL's
    import torch

    if not torch.cuda.is_available():
        print("flashinfer_kernels.py probe: needs a CUDA GPU; on a CPU host, use `build`", file=sys.stderr)
        return 2
    checks = {f"attention {backend}, head dim {head_dim(SHAPES[shape])}": functools.partial(probe_attention, shape, backend)
              for backend in ATTENTION_BACKENDS}
    checks[", ".join(spec.name for spec in shape_independent_specs())] = probe_shape_independent
    return run_checks("FlashInfer", shape, checks)


def main() -> int:
    args = command_line(__doc__, ".gpu/flashinfer-aot.tar.xz", "its bin/nvcc and lib64/libcudart.so")[0].parse_args()
    if args.command == "build":
        build(args.archive, args.shapes, args.cuda_home)
        return 0
    return probe(args.shape)


if __name__ == "__main__":
    sys.exit(main())
