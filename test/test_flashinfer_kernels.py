"""CPU tests of benchmark/pairs/flashinfer_kernels.py: what a CPU host lacks for FlashInfer's builds,
and the probe's bit-packing reference (test_carried_kernels.py has the rest of the probe). The build
itself (minutes of nvcc) and the probe's run (a GPU) are not tested here: gpu_job.sh probes the
carried kernels before a plan uses them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmark.pairs import flashinfer_kernels


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


def test_the_probes_bit_packing_reference_is_numpys():
    import numpy as np
    import torch

    bits = torch.rand(64, generator=torch.Generator().manual_seed(0)) > 0.5
    assert flashinfer_kernels.packbits_reference(bits).tolist() == np.packbits(bits.numpy(), bitorder="big").tolist()
