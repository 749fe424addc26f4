"""CPU tests of benchmark/pairs/flashinfer_kernels.py: what a CPU host lacks for FlashInfer's builds,
and the probe's answer where there is no GPU. The build itself (minutes of nvcc) and the probe's
run (a GPU) are not tested here: gpu_job.sh probes the carried kernels before a plan uses them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.pairs import flashinfer_kernels

BENCH = Path(__file__).resolve().parents[1] / "benchmark"


def test_a_cpu_host_gets_the_headers_its_toolkit_lacks_and_keeps_its_own(tmp_path):
    toolkit = tmp_path / "cuda"
    (toolkit / "include").mkdir(parents=True)
    (toolkit / "include/cuda_runtime.h").write_text("// the toolkit's own\n")
    (toolkit / "lib64/stubs").mkdir(parents=True)
    (toolkit / "lib64/stubs/libcuda.so").write_bytes(b"")  # a full toolkit's link stub
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = flashinfer_kernels.cpu_host_build_env(toolkit, scratch)
    assert env["FLASHINFER_CUDA_ARCH_LIST"] == "9.0a"  # the H200, which this host cannot ask
    assert env["CUDA_HOME"] == str(toolkit) and env["FLASHINFER_WORKSPACE_BASE"] == str(scratch)
    headers = Path(env["CPATH"].split(os.pathsep)[0])
    assert (headers / "curand_kernel.h").resolve().is_file()  # from torch's nvidia wheels
    assert not (headers / "cuda_runtime.h").exists()
    assert "LIBRARY_PATH" not in env


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler, as nvcc does")
def test_a_cpu_host_without_a_driver_links_against_an_empty_libcuda(tmp_path):
    toolkit = tmp_path / "cuda"
    (toolkit / "include").mkdir(parents=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = flashinfer_kernels.cpu_host_build_env(toolkit, scratch)
    stub = Path(env["LIBRARY_PATH"].split(os.pathsep)[0]) / "libcuda.so"
    assert stub.read_bytes()[:4] == b"\x7fELF"


def test_probe_on_a_cpu_host_says_what_it_needs():
    probe = subprocess.run([sys.executable, str(BENCH / "flashinfer_kernels.py"), "probe", "1b"],
                           capture_output=True, text=True, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    assert probe.returncode == 2
    assert "needs a CUDA GPU" in probe.stderr and "Traceback" not in probe.stderr


def test_gpu_job_finds_the_probes_verdict_by_its_line():
    assert f'grep -q "^{flashinfer_kernels.PASSED.format(shape="$1")}"' in (BENCH / "gpu_job.sh").read_text()


def test_the_probes_reference_is_causal_attention_ending_at_the_last_key():
    """The probe judges FlashInfer against attention_reference: checked here against PyTorch's
    own attention, with each request's queries taken as its last positions (a cached prefix)."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(0)
    qo_indptr, kv_indptr = [0, 7, 40], [0, 40, 73]
    q = torch.randn(40, 8, 16, generator=gen)
    k, v = torch.randn(73, 2, 16, generator=gen), torch.randn(73, 2, 16, generator=gen)
    expected = []
    for r in range(2):
        qr = q[qo_indptr[r]:qo_indptr[r + 1]].transpose(0, 1)
        kr, vr = (t[kv_indptr[r]:kv_indptr[r + 1]].repeat_interleave(4, dim=1).transpose(0, 1) for t in (k, v))
        mask = torch.ones(qr.shape[1], kr.shape[1], dtype=torch.bool).tril(kr.shape[1] - qr.shape[1])
        expected.append(F.scaled_dot_product_attention(qr, kr, vr, attn_mask=mask).transpose(0, 1))
    got = flashinfer_kernels.attention_reference(q, k, v, qo_indptr, kv_indptr)
    torch.testing.assert_close(got, torch.cat(expected), atol=1e-5, rtol=1e-5)


def test_the_probes_bit_packing_reference_is_numpys():
    import numpy as np
    import torch

    bits = torch.rand(64, generator=torch.Generator().manual_seed(0)) > 0.5
    assert flashinfer_kernels.packbits_reference(bits).tolist() == np.packbits(bits.numpy(), bitorder="big").tolist()
