"""CPU tests of benchmark/pairs/carried_kernels.py and of the two tools that use it
(flashinfer_kernels.py and fa3_kernels.py): the reference their probes judge kernels against,
the verdict gpu_job.sh reads, the probes' answer where there is no GPU, and the shared command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmark.pairs.carried_kernels import PASSED, TOLERANCE, attention_reference, command_line, run_checks

BENCH = Path(__file__).resolve().parents[1] / "benchmark"
PROBES = [("flashinfer_kernels.py", "FlashInfer", "1b"), ("fa3_kernels.py", "FA3", "8b")]


def test_the_reference_is_causal_attention_ending_at_the_last_key():
    """Checked against PyTorch's own attention, with each request's queries taken as its last
    positions (a cached prefix)."""
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
    got = attention_reference(q, k, v, qo_indptr, kv_indptr)
    torch.testing.assert_close(got, torch.cat(expected), atol=1e-5, rtol=1e-5)


def test_the_verdict_passes_only_when_every_check_is_within_tolerance(capsys):
    assert run_checks("FA3", "8b", {"decode": lambda: 0.01, "prefill": lambda: TOLERANCE}) == 0
    assert capsys.readouterr().out.splitlines()[-1] == PASSED.format(kind="FA3", shape="8b")

    def refused() -> float:
        raise RuntimeError("no kernel for that\nsecond line")

    assert run_checks("FA3", "8b", {"decode": lambda: 0.9, "verify": refused, "prefill": lambda: 0.0}) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "FA3 kernels for 8b fail: decode: max difference 0.9000 over 0.05" in lines
    assert "FA3 kernels for 8b fail: verify: RuntimeError: no kernel for that" in lines
    assert "FA3 prefill: max difference 0.0000" in lines  # the checks after a failure still run
    assert not any(line.endswith(" pass") for line in lines)


@pytest.mark.parametrize("script, kind, shape", PROBES)
def test_a_probe_on_a_cpu_host_says_what_it_needs(script, kind, shape):
    probe = subprocess.run([sys.executable, str(BENCH / script), "probe", shape],
                           capture_output=True, text=True, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    assert probe.returncode == 2
    assert "needs a CUDA GPU" in probe.stderr and "Traceback" not in probe.stderr


@pytest.mark.parametrize("script, kind, shape", PROBES)
def test_gpu_job_finds_each_probes_verdict_by_its_line(script, kind, shape):
    job = (BENCH / "gpu_job.sh").read_text()
    assert f'grep -q "^{PASSED.format(kind=kind, shape="$1")}"' in job
    assert f"python3 benchmark/{script} probe" in job


def test_the_command_line_builds_the_pairs_shapes_by_default():
    ap, build_args = command_line("doc", ".gpu/x.tar.xz", "its bin/nvcc")
    build_args.add_argument("--jobs", type=int, default=2)  # a tool's own option
    args = ap.parse_args(["build", "out.tar.xz"])
    assert (args.command, args.archive, args.shapes, args.jobs) == ("build", Path("out.tar.xz"), ["1b", "8b"], 2)
    assert ap.parse_args(["probe", "8b"]).shape == "8b"
    with pytest.raises(SystemExit):
        ap.parse_args(["probe", "9b"])
