"""Where the GPU time goes, from a torch-profiler trace: per decode step, or per prefill wave.

``sweep.py --profile-concurrency C`` takes the traces (SGLang's ``/start_profile``, GPU activity):
``--profile-steps`` forward steps of steady decode at batch C, and with ``--profile-prefill`` one
wave of C requests sent at once. ``summarize_trace`` turns a trace into ``profile-<config>.json``
or ``profile-prefill-<config>.json``: kernels summed by name and family, GPU busy time per step
(a wave counts as one), and how busy the GPU was over the profiled span (idle gaps are CPU-side
cost; meaningless for a wave, whose span includes the client's start).
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

TOP_KERNELS = 12
# Kernel families, by substrings of their names (Triton, FlashInfer, cuBLAS/nvjet, CUTLASS).
FAMILIES = {
    "attention": ("_fwd_kernel", "_fwd_grouped_kernel", "attention", "flash", "fmha"),
    "gemm": ("nvjet", "gemm", "cutlass", "xmma", "splitk"),
}


def family(kernel_name: str) -> str:
    name = kernel_name.lower()
    for fam, needles in FAMILIES.items():
        if any(n.lower() in name for n in needles):
            return fam
    return "other"


def summarize_trace(trace: dict, steps: int) -> dict:
    """Per-kernel GPU time (ms) of a Chrome trace as written by the torch profiler."""
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    if not kernels:
        raise ValueError("the trace holds no GPU kernels")
    by_name: Counter = Counter()
    calls: Counter = Counter()
    for e in kernels:
        by_name[e["name"]] += e["dur"] / 1e3
        calls[e["name"]] += 1
    busy = sum(by_name.values())
    span = (max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)) / 1e3
    families: Counter = Counter()
    for name, ms in by_name.items():
        families[family(name)] += ms
    return {
        "steps": steps,
        "busy_ms_per_step": busy / steps,
        "span_ms_per_step": span / steps,
        "gpu_busy_fraction": busy / span if span else None,
        "family_ms_per_step": {f: families[f] / steps for f in ("attention", "gemm", "other")},
        "top_kernels": [
            {"name": name, "ms_per_step": ms / steps, "calls_per_step": calls[name] / steps}
            for name, ms in by_name.most_common(TOP_KERNELS)
        ],
    }


def summarize_file(path: Path, steps: int) -> dict:
    with gzip.open(path) as f:
        return summarize_trace(json.load(f), steps)


def summary_line(summary: dict) -> str:
    fam = summary["family_ms_per_step"]
    phase = summary.get("phase", "decode")
    unit, span = ("step", f", {summary['gpu_busy_fraction']:.0%} of the span") if phase == "decode" else ("wave", "")
    return (f"{summary['config']} {phase} profile c={summary['concurrency']}: GPU busy "
            f"{summary['busy_ms_per_step']:.2f} ms/{unit} (attention {fam['attention']:.2f}, gemm "
            f"{fam['gemm']:.2f}, other {fam['other']:.2f}){span}")
