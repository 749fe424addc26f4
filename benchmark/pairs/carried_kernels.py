"""What the two tools for the kernels the GPU kit carries (flashinfer_kernels.py and
fa3_kernels.py) share: their command line, `build` on a CPU host and `probe` on the GPU host, and
the probe's judging of the kernels against PyTorch, each check once, then the verdict in the line
gpu_job.sh looks for."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Callable

from benchmark.pairs.design import SHAPES

# bf16 outputs of values of order 1: rounding alone stays under 1e-2; a wrong kernel is off by ~1.
TOLERANCE = 5e-2
PASSED = "{kind} kernels for {shape} pass"  # gpu_job.sh finds a plan's verdict by this line


def attention_reference(q, k, v, qo_indptr, kv_indptr):
    """Causal attention of each request's queries on its keys, the queries being its last ones,
    in float32."""
    import torch

    group = q.shape[1] // k.shape[1]
    out = []
    for r in range(len(qo_indptr) - 1):
        qr = q[qo_indptr[r]:qo_indptr[r + 1]].float()
        kr = k[kv_indptr[r]:kv_indptr[r + 1]].float().repeat_interleave(group, dim=1)
        vr = v[kv_indptr[r]:kv_indptr[r + 1]].float().repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qr, kr) * qr.shape[-1] ** -0.5
        offset = len(kr) - len(qr)
        allowed = torch.arange(len(kr), device=q.device)[None, :] <= torch.arange(len(qr), device=q.device)[:, None] + offset
        out.append(torch.einsum("hqk,khd->qhd", scores.masked_fill(~allowed, float("-inf")).softmax(-1), vr))
    return torch.cat(out)


def run_checks(kind: str, shape: str, checks: dict[str, Callable[[], float]]) -> int:
    """Each check, which returns its largest difference from PyTorch; 0 if all are within
    TOLERANCE, else 1, with a line for each that is not or that raised."""
    failed = []
    for name, check in checks.items():
        try:
            error = check()
        except Exception as e:  # a missing, unloadable or refused kernel: say which, then go on to the rest
            failed.append(f"{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            continue
        print(f"{kind} {name}: max difference {error:.4f}")
        if not error <= TOLERANCE:
            failed.append(f"{name}: max difference {error:.4f} over {TOLERANCE}")
    for failure in failed:
        print(f"{kind} kernels for {shape} fail: {failure}")
    if failed:
        return 1
    print(PASSED.format(kind=kind, shape=shape))
    return 0


def command_line(description: str, archive: str, toolkit_parts: str) -> tuple[argparse.ArgumentParser,
                                                                            argparse.ArgumentParser]:
    """`build ARCHIVE [--shapes ...] [--cuda-home DIR]` and `probe SHAPE`; with the build
    command's parser, for a tool's own build options."""
    ap = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    build_args = sub.add_parser("build", help="compile the kernels on this host and pack them")
    build_args.add_argument("archive", type=Path, help=f"the .tar.xz to write, e.g. {archive}")
    build_args.add_argument("--shapes", nargs="+", choices=sorted(SHAPES), default=["1b", "8b"])
    build_args.add_argument("--cuda-home", type=Path, default=Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")),
                            help=f"the CUDA 13.0 toolkit ({toolkit_parts})")
    probe_args = sub.add_parser("probe", help="run the installed kernels once on this host's GPU")
    probe_args.add_argument("shape", choices=sorted(SHAPES))
    return ap, build_args
