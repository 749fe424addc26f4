"""SGLang's FA3 attention for the project's lent GPU host: built on a CPU host, checked on the GPU.

The kit drops sgl-kernel's FA3 library, sgl_kernel/flash_ops.abi3.so (1.1 GB: every dtype, head
dim and feature, for sm_80 to sm_90a, far over the 64 MiB a device call carries), so the GPU
host cannot serve with SGLang's default Hopper backend. This builds the part of it that backend
runs for the model pair's shapes (bf16, a paged KV cache of one-token pages, causal, sm_90a) from
the FlashAttention and CUTLASS sources sgl-kernel builds it from, with our own binding of its two
ops (fa3_ops.cc), and packs it in .gpu/fa3-ops.tar.xz, which gpu_job.sh installs in its place.

    python benchmark/fa3_kernels.py build .gpu/fa3-ops.tar.xz --shapes 1b 8b
        On any x86-64 host with CUDA 13.0's nvcc, a C++17 compiler, git and the project's .venv
        (torch 2.11; no GPU needed): fetches the two sources at their pinned commits (from
        GitHub, or from the git repositories --flash-attention and --cutlass name), compiles the
        kernels the shapes need, links and checks the library, packs it with a manifest.
    python3 benchmark/fa3_kernels.py probe 8b
        On the GPU host, with the archive installed: the ops once in each mode the servers run
        (decode, a 4-token target verify, a prefill after a cached prefix), at that shape's head
        dim, with the split count chosen and forced, against PyTorch. Exits 1 naming what failed.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from benchmark.pairs.carried_kernels import attention_reference, command_line, run_checks
from benchmark.pairs.design import SHAPES, head_dim
from benchmark.pairs.shared_library import unresolved_symbols

HERE = Path(__file__).resolve().parent
LIBRARY = "flash_ops.abi3.so"  # the name `from sgl_kernel import flash_ops` finds
MANIFEST = "fa3-ops-manifest.json"


@dataclass(frozen=True)
class Source:
    repository: str  # where `build` fetches it unless told another
    commit: str
    paths: tuple[str, ...]  # all the build reads of it


# sgl-kernel 0.4.5 builds flash_ops from sgl-project/sgl-attn at f89bc2306632 (its CMakeLists.txt),
# a commit in no snapshot this was built from. This is the nearest one that was: the sgl-kernel
# branch of a fork of sgl-attn (2026-03-01), whose mha_fwd lacks 0.4.5's sparse_mask_fine and
# only_qv, which fa3_ops.cc therefore refuses.
FLASH_ATTENTION = Source("https://github.com/aMarry/sgl-flash-attn.git",
                         "bcf72ccc6816b36a5fae2c5a3c027604629785e0", ("hopper",))
CUTLASS = Source("https://github.com/NVIDIA/cutlass.git",  # sgl-kernel 0.4.5's pin
                 "57e3cfb47a2d9e0d46eb6335c3dc411498efa198", ("include", "tools/util/include"))

# The head dims FA3 has kernels for; a model's rounds up to the next (flash_api.cpp's dispatch).
KERNEL_HEAD_DIMS = (64, 96, 128, 192, 256)
# What SGLang's FA3 backend never asks of a bf16 Llama: turned off in the source, so that its
# dispatch names no kernel the build leaves out. Local attention, softcap, appended KV and FP8
# are refused by the source's own checks; PACKGQA and CLUSTER only drop variants of kernels
# that paged and split calls never run.
DISABLED_FEATURES = ("BACKWARD", "DROPOUT", "SM8x", "LOCAL", "APPENDKV", "SOFTCAP", "PACKGQA", "CLUSTER",
                     "FP8", "FP16", "HDIMDIFF64", "HDIMDIFF192")
# The source files every build compiles: the ops' host code, the split-KV combine and the scheduler.
COMMON_SOURCES = ("flash_api.cpp", "flash_fwd_combine.cu", "flash_prepare_scheduler.cu")
# sgl-kernel 0.4.5's flags for its FA3 sources (SGL_FLASH_KERNEL_CUDA_FLAGS), for the H100/H200
# alone and without its warning flags.
NVCC_FLAGS = ("-O3", "-DNDEBUG", "-std=c++17", "-Xcompiler", "-fPIC", "-gencode=arch=compute_90a,code=sm_90a",
              "-DCUTE_USE_PACKED_TUPLE=1", "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1", "-DCUTLASS_VERSIONS_GENERATED",
              "-DCUTLASS_TEST_LEVEL=0", "-DCUTLASS_TEST_ENABLE_CACHED_RESULTS=1", "-DCUTLASS_DEBUG_TRACE_LEVEL=0",
              "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
              "-Xcompiler=-fno-strict-aliasing")
CXX_FLAGS = ("-O3", "-DNDEBUG", "-std=c++17", "-fPIC")  # its C++ flags (CMAKE_CXX_FLAGS)

# sgl-kernel 0.4.5's schemas (strings in its flash_ops.abi3.so), which its flash_attn.py calls by
# position and, for flash_attn_varlen_func's last ones, by name.
FWD_SCHEMA = (
    "fwd(Tensor q, Tensor k, Tensor v, Tensor? k_new, Tensor? v_new, Tensor? q_v, Tensor(a!)? out, "
    "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? cu_seqlens_k_new, Tensor? seqused_q, "
    "Tensor? seqused_k, int? max_seqlen_q, int? max_seqlen_k, Tensor? page_table, Tensor? kv_batch_idx, "
    "Tensor? leftpad_k, Tensor? rotary_cos, Tensor? rotary_sin, Tensor? seqlens_rotary, Tensor? q_descale, "
    "Tensor? k_descale, Tensor? v_descale, float? softmax_scale, bool is_causal, int window_size_left, "
    "int window_size_right, int attention_chunk, float softcap, bool is_rotary_interleaved, "
    "Tensor? scheduler_metadata, int num_splits, bool? pack_gqa, int sm_margin, Tensor? sinks, "
    "Tensor? sparse_mask_fine, bool only_qv) -> (Tensor(a!), Tensor, Tensor, Tensor)")
GET_SCHEDULER_METADATA_SCHEMA = (
    "get_scheduler_metadata(int batch_size, int max_seqlen_q, int max_seqlen_k, int num_heads, "
    "int num_heads_k, int headdim, int headdim_v, ScalarType qkv_dtype, Tensor seqused_k, "
    "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, Tensor? cu_seqlens_k_new, Tensor? seqused_q, "
    "Tensor? leftpad_k, int? page_size, int max_seqlen_k_new = 0, bool is_causal = False, "
    "int window_size_left = -1, int window_size_right = -1, int attention_chunk = 0, "
    "bool has_softcap = False, int num_splits = 0, bool? pack_gqa = None, int sm_margin = 0) -> Tensor")


def kernel_head_dims(shapes: list[str]) -> list[int]:
    return sorted({min(d for d in KERNEL_HEAD_DIMS if d >= head_dim(SHAPES[shape])) for shape in shapes})


def instantiations(head_dims: list[int]) -> list[str]:
    """The source's kernel files (under hopper/) SGLang's FA3 backend runs at those head dims: with
    one-token pages, which TMA cannot load, every call takes the paged kernels that read KV
    without TMA, split or not (fa3_ops.cc refuses the others)."""
    return [f"instantiations/flash_fwd_hdim{d}_bf16_paged{split}_sm90.cu" for d in head_dims for split in ("", "_split")]


def defines(head_dims: list[int]) -> list[str]:
    return ([f"-DFLASHATTENTION_DISABLE_{feature}" for feature in DISABLED_FEATURES]
            + [f"-DFLASHATTENTION_DISABLE_HDIM{d}" for d in KERNEL_HEAD_DIMS if d not in head_dims])


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path
    cxx: str
    include_dirs: tuple[Path, ...]  # the FA3 source's, CUTLASS's, torch's, CUDA's, Python's, the wheels'
    torch_cxx11_abi: bool
    link_dirs: tuple[Path, ...]  # torch's libraries and the CUDA runtime


def toolchain(cuda_home: Path, flash_attention: Path, cutlass: Path) -> Toolchain:
    os.environ["CUDA_HOME"] = str(cuda_home)  # the toolkit torch's cpp_extension reports at import
    import nvidia
    import torch
    from torch.utils import cpp_extension

    # torch's CUDA headers include those of CUDA libraries (cusparse, cublas) that a compiler-only
    # toolkit leaves out: the nvidia wheels torch installed hold them, searched after the toolkit.
    wheel_includes = sorted(include for base in nvidia.__path__ for include in Path(base).glob("*/include"))
    return Toolchain(
        cuda_home / "bin/nvcc", os.environ.get("CXX", "c++"),
        (flash_attention / "hopper", cutlass / "include", cutlass / "tools/util/include",
         *map(Path, cpp_extension.include_paths()), cuda_home / "include", Path(sysconfig.get_paths()["include"]),
         *wheel_includes),
        torch._C._GLIBCXX_USE_CXX11_ABI, (Path(cpp_extension.library_paths()[0]), cuda_home / "lib64"))


def compile_commands(tools: Toolchain, head_dims: list[int], objects: Path) -> dict[Path, list[str]]:
    """Each object file and the command that compiles it."""
    common = [f"-I{d}" for d in tools.include_dirs] + defines(head_dims) + [
        f"-D_GLIBCXX_USE_CXX11_ABI={int(tools.torch_cxx11_abi)}"]
    hopper = tools.include_dirs[0]
    commands = {}
    for source in [*COMMON_SOURCES, *instantiations(head_dims)]:
        out = objects / (Path(source).stem + ".o")
        if source.endswith(".cu"):
            commands[out] = [str(tools.nvcc), *NVCC_FLAGS, *common, "-c", str(hopper / source), "-o", str(out)]
        else:
            commands[out] = [tools.cxx, *CXX_FLAGS, *common, "-c", str(hopper / source), "-o", str(out)]
    ops = objects / "fa3_ops.o"
    commands[ops] = [tools.cxx, *CXX_FLAGS, *common, f"-DSPECGATE_FWD_SCHEMA={json.dumps(FWD_SCHEMA)}",
                     f"-DSPECGATE_GET_SCHEDULER_METADATA_SCHEMA={json.dumps(GET_SCHEDULER_METADATA_SCHEMA)}",
                     "-c", str(HERE / "fa3_ops.cc"), "-o", str(ops)]
    return commands


def link_command(tools: Toolchain, objects: list[Path], library: Path) -> list[str]:
    # Python's symbols stay undefined: the interpreter that imports the module defines them. The
    # kernels reach the driver through the runtime (CUTLASS's cudaGetDriverEntryPoint), so no libcuda.
    return [tools.cxx, "-shared", "-o", str(library), *map(str, objects),
            *(f"-L{d}" for d in tools.link_dirs),
            "-lc10", "-lc10_cuda", "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-lcudart"]


class FetchFailed(Exception):
    """A source's pinned commit could not be fetched; the message names the flag that fixes it."""


def fetch(source: Source, repository: str, into: Path, flag: str) -> None:
    """source's paths at its commit, from ``repository`` (a URL or a local git repository, given
    by ``flag``): a shallow, blobless fetch of that commit, its paths alone checked out
    (CUTLASS's whole tree is ten times the headers)."""
    git = ["git", "-C", str(into)]
    into.mkdir(parents=True)
    for command in (["init", "-q"], ["remote", "add", "origin", repository],
                    # A local repository serves a blobless fetch only if its upload-pack allows
                    # filters; GitHub's does, and ignores this.
                    ["config", "remote.origin.uploadpack", "git -c uploadpack.allowFilter=true upload-pack"],
                    ["sparse-checkout", "set", "--no-cone", *(f"/{path}/" for path in source.paths)],
                    ["fetch", "-q", "--depth", "1", "--filter=blob:none", "origin", source.commit],
                    ["checkout", "-q", "FETCH_HEAD"]):
        done = subprocess.run(git + command, capture_output=True, text=True)
        if done.returncode:
            said = (done.stderr.strip().splitlines() or [f"git {command[0]} exited {done.returncode}"])[-1]
            raise FetchFailed(f"{flag}: could not fetch {source.commit[:12]} from {repository} ({said}); "
                              f"on a host without network, give {flag} a local git repository that holds it")


def run_all(commands: dict[Path, list[str]], jobs: int) -> None:
    """The commands, ``jobs`` at a time (an FA3 kernel file takes up to 5.3 GB and one to two
    CPU-minutes to compile); stops at the first failure, with its compiler's output."""
    def one(out: Path) -> None:
        t0 = time.monotonic()
        done = subprocess.run(commands[out], capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{out.stem} failed:\n{' '.join(commands[out])}\n{done.stderr[-6000:]}")
        print(f"  {out.stem}: {time.monotonic() - t0:.0f} s", flush=True)

    with ThreadPoolExecutor(jobs) as pool:
        for _ in pool.map(one, commands):
            pass


def tool_version(command: list[str]) -> str:
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]


def manifest(shapes: list[str], repositories: dict[str, str], tools: Toolchain) -> dict:
    import torch

    head_dims = kernel_head_dims(shapes)
    return {
        "sources": {name: {"repository": repositories[name], "commit": source.commit, "paths": list(source.paths)}
                    for name, source in (("flash-attention", FLASH_ATTENTION), ("cutlass", CUTLASS))},
        "shapes": shapes, "head_dims": head_dims, "instantiations": instantiations(head_dims),
        "defines": defines(head_dims), "nvcc_flags": list(NVCC_FLAGS), "cxx_flags": list(CXX_FLAGS),
        "schemas": [FWD_SCHEMA, GET_SCHEDULER_METADATA_SCHEMA],
        "toolchain": {"nvcc": tool_version([str(tools.nvcc), "--version"]),
                      "cxx": tool_version([tools.cxx, "-dumpfullversion"]), "torch": torch.__version__},
    }


def build(archive: Path, shapes: list[str], cuda_home: Path, repositories: dict[str, str], jobs: int) -> None:
    t0 = time.monotonic()
    partial = archive.with_name(archive.name + ".partial")  # a failed build keeps the old archive
    with tempfile.TemporaryDirectory(prefix="fa3-kernels-") as scratch:
        scratch = Path(scratch)
        for name, source in (("flash-attention", FLASH_ATTENTION), ("cutlass", CUTLASS)):
            fetch(source, repositories[name], scratch / name, flag=f"--{name}")
        tools = toolchain(cuda_home, scratch / "flash-attention", scratch / "cutlass")
        (scratch / "objects").mkdir()
        commands = compile_commands(tools, kernel_head_dims(shapes), scratch / "objects")
        print(f"compiling {len(commands)} files, {jobs} at a time", flush=True)
        run_all(commands, jobs)
        library = scratch / LIBRARY
        subprocess.run(link_command(tools, list(commands), library), check=True)
        subprocess.run(["strip", "--strip-unneeded", str(library)], check=True)
        # A kernel the dispatch names but the build left out, or a mha_fwd whose signature is
        # not the one fa3_ops.cc declares, would fail the import on the GPU host: fail here.
        missing = [s for s in unresolved_symbols(library, tools.link_dirs) if not s.startswith(("Py", "_Py"))]
        if missing:
            raise RuntimeError(f"{LIBRARY} leaves symbols no library defines: {missing[:10]}")
        (scratch / MANIFEST).write_text(json.dumps(manifest(shapes, repositories, tools), indent=1) + "\n")
        with tarfile.open(partial, "w:xz", preset=9) as tar:  # laid out as the sgl_kernel package
            tar.add(library, arcname=LIBRARY)
            tar.add(scratch / MANIFEST, arcname=MANIFEST)
        size = library.stat().st_size
    partial.replace(archive)
    print(f"wrote {archive} ({archive.stat().st_size:,} B; {LIBRARY} {size:,} B) for shapes "
          f"{', '.join(shapes)} in {time.monotonic() - t0:.0f} s")


# One request's lengths per mode: (queries, keys with them), as the servers' forward batches have
# them. The longest key run spans several KV blocks, so that the forced splits each get some.
MODES = {
    "decode": [(1, 40), (1, 300), (1, 1500)],
    "target verify": [(4, 44), (4, 304), (4, 1504)],  # 3 draft tokens and the last one, written first
    "prefill": [(7, 40), (33, 33), (300, 800)],  # after cached prefixes of 33, none and 500
    # The gate's off state on FA3's decode path (one_token_decode): a deferred draft KV write
    # reads one entry a row, over more rows than FA3's one-block scheduling takes (992).
    "off-state draft write": [(1, 1)] * 1024,
}
# 1: what the off state's draft extend and deterministic inference run; 4: forced splits.
SPLITS = (0, 1, 4)


def probe_mode(shape: str, lengths: list[tuple[int, int]], num_splits: int) -> float:
    """The largest difference from PyTorch of flash_attn_with_kvcache, called as SGLang's FA3
    backend calls it (a page table of one-token pages, scattered; decode with the scheduler
    metadata it precomputes), on requests of those lengths."""
    import torch
    from sgl_kernel.flash_attn import flash_attn_with_kvcache, get_scheduler_metadata

    dims = SHAPES[shape]
    dim, heads, kv_heads = head_dim(dims), dims["num_attention_heads"], dims["num_key_value_heads"]
    qo_lens, kv_lens = zip(*lengths)
    gen = torch.Generator(device="cuda").manual_seed(0)
    slots = torch.randperm(sum(kv_lens) + 64, generator=gen, device="cuda").int()
    k_cache, v_cache = (torch.randn(len(slots), 1, kv_heads, dim, generator=gen, device="cuda", dtype=torch.bfloat16)
                        for _ in range(2))
    page_table = torch.zeros(len(lengths), max(kv_lens), dtype=torch.int32, device="cuda")
    for r, (start, n) in enumerate(zip(itertools.accumulate(kv_lens, initial=0), kv_lens)):
        page_table[r, :n] = slots[start:start + n]
    q = torch.randn(sum(qo_lens), heads, dim, generator=gen, device="cuda", dtype=torch.bfloat16)
    cache_seqlens = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    qo_indptr, kv_indptr = ([0, *itertools.accumulate(lens)] for lens in (qo_lens, kv_lens))
    cu_seqlens_q = torch.tensor(qo_indptr, dtype=torch.int32, device="cuda")
    if max(qo_lens) == 1:  # decode: the scheduler's metadata precomputed, as SGLang does for a batch
        extra = dict(scheduler_metadata=get_scheduler_metadata(
            len(lengths), 1, max(kv_lens), heads, kv_heads, dim, cache_seqlens, cu_seqlens_q=cu_seqlens_q,
            page_size=1, causal=True, num_splits=num_splits))
    else:  # extend: SGLang passes the keys' offsets too, which the kernels ignore without new keys
        extra = dict(cu_seqlens_k_new=torch.tensor(kv_indptr, dtype=torch.int32, device="cuda"))
    out = flash_attn_with_kvcache(
        q, k_cache, v_cache, page_table=page_table, cache_seqlens=cache_seqlens, cu_seqlens_q=cu_seqlens_q,
        max_seqlen_q=max(qo_lens), causal=True, num_splits=num_splits, **extra)
    ragged = torch.cat([page_table[r, :n] for r, n in enumerate(kv_lens)]).long()
    expected = attention_reference(q, k_cache[ragged, 0], v_cache[ragged, 0], qo_indptr, kv_indptr)
    return (out.float() - expected).abs().max().item()


def probe(shape: str) -> int:
    import torch

    if not torch.cuda.is_available():
        print("fa3_kernels.py probe: needs a CUDA GPU; on a CPU host, use `build`", file=sys.stderr)
        return 2
    return run_checks("FA3", shape, {
        f"{mode}, head dim {head_dim(SHAPES[shape])}, num_splits {num_splits}":
            functools.partial(probe_mode, shape, lengths, num_splits)
        for (mode, lengths), num_splits in itertools.product(MODES.items(), SPLITS)})


def arguments() -> argparse.ArgumentParser:
    ap, build_args = command_line(__doc__, ".gpu/fa3-ops.tar.xz", "its bin/nvcc, include and lib64/libcudart.so")
    build_args.add_argument("--flash-attention", default=FLASH_ATTENTION.repository,
                            help=f"a git repository (URL or path) holding {FLASH_ATTENTION.commit[:12]}")
    build_args.add_argument("--cutlass", default=CUTLASS.repository,
                            help=f"a git repository (URL or path) holding {CUTLASS.commit[:12]}")
    build_args.add_argument("--jobs", type=int, default=2, help="compilers at a time (up to 5.3 GB each; default 2)")
    return ap


def main() -> int:
    args = arguments().parse_args()
    if args.command == "build":
        try:
            build(args.archive, args.shapes, args.cuda_home,
                  {"flash-attention": args.flash_attention, "cutlass": args.cutlass}, args.jobs)
        except FetchFailed as e:
            print(f"fa3_kernels.py build: {e}", file=sys.stderr)
            return 2
        return 0
    return probe(args.shape)


if __name__ == "__main__":
    sys.exit(main())
