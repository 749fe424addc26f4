"""Reading a torch-profiler trace (Chrome trace JSON, as SGLang's ``/start_profile`` writes it):
the GPU's work and its pauses, the host's calls and spans, and which forward step each piece of
GPU work belongs to, a decode step or a prefill."""

from __future__ import annotations

import bisect
import gzip
import json
from pathlib import Path

# A pause between kernels longer than this is the GPU waiting (on the CPU, a sync, another
# stream), not a launch inside a CUDA graph (~1 us apart).
IDLE_GAP_US = 3.0

# Host calls that return only when the GPU got somewhere: a sync, or a copy that waits for its
# stream. Shorter than IDLE_GAP_US, one did not wait.
HOST_WAIT_NAMES = ("Synchronize", "cudaMemcpy", "cuMemcpy")
HOST_CALLS = ("cuda_runtime", "cuda_driver")
HOST_OPS_AND_CALLS = ("cpu_op", *HOST_CALLS)  # torch ops, then CUDA runtime and driver calls

# Innermost spans searched backwards from an instant; a step has far fewer on one thread.
SPAN_SEARCH = 4000


def read_trace(path: Path) -> dict:
    with gzip.open(path) as f:
        return json.load(f)


def events_of(trace) -> list[dict]:
    return trace.get("traceEvents", trace) if isinstance(trace, dict) else trace


def gpu_work(events: list[dict]) -> list[dict]:
    """Kernels, copies and memsets, by start time: what keeps the GPU busy."""
    return sorted((e for e in events if e.get("ph") == "X" and "dur" in e
                   and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")), key=lambda e: e["ts"])


def gpu_pauses(work: list[dict]):
    """The pauses longer than IDLE_GAP_US in the union of ``work`` (by start time; streams may
    overlap): (when the pause began, the name of what ended last before it, what ended it)."""
    end, last = None, None
    for e in work:
        if end is not None and e["ts"] - end > IDLE_GAP_US:
            yield end, last, e
        if end is None or e["ts"] + e["dur"] >= end:
            end, last = e["ts"] + e["dur"], e["name"]


class HostSpans:
    """One host thread's spans of one category, to name the innermost one around an instant."""

    def __init__(self, spans: list[dict]) -> None:
        self.spans = sorted(spans, key=lambda e: e["ts"])
        self.starts = [e["ts"] for e in self.spans]

    def open_at(self, t: float):
        """Names of the spans open at ``t``, innermost first."""
        last = bisect.bisect_right(self.starts, t) - 1  # the latest span started by t
        for i in range(last, max(last - SPAN_SEARCH, -1), -1):
            if self.spans[i]["ts"] + self.spans[i]["dur"] >= t:
                yield self.spans[i]["name"]


def host_waits(events: list[dict]) -> dict:
    """Per host thread, its calls that waited on the GPU: named so, IDLE_GAP_US or longer."""
    waits: dict = {}
    for e in events:
        if (e.get("cat") in HOST_CALLS and e.get("dur", 0) >= IDLE_GAP_US
                and any(n in e["name"] for n in HOST_WAIT_NAMES)):
            waits.setdefault(e["tid"], []).append(e)
    return waits


def host_calls(events: list[dict]) -> list[dict]:
    """The runtime and driver calls of a trace with CPU activity."""
    return [e for e in events if e.get("cat") in HOST_CALLS and "dur" in e]


def launches(calls: list[dict]) -> dict:
    """Each GPU work item's launching host call, by the correlation id they share (a CUDA
    graph's kernels share their replay's)."""
    return {e["args"]["correlation"]: e for e in calls if "correlation" in e.get("args", {})}


def spans_by_thread(events: list[dict], cat: str, named=lambda name: True) -> dict:
    """Per host thread, its spans of category ``cat`` whose names pass ``named``."""
    by_tid: dict = {}
    for e in events:
        if e.get("cat") == cat and e.get("ph") == "X" and "dur" in e and named(e["name"]):
            by_tid.setdefault(e["tid"], []).append(e)
    return {tid: HostSpans(s) for tid, s in by_tid.items()}


def host_place(annotations: HostSpans | None, ops: HostSpans | None, t: float,
               depth: int | None = None, kind=lambda name: name) -> str:
    """Where one host thread was at ``t``: its open annotated spans, outermost first (the first
    ``depth`` of them, each named by ``kind``), then its innermost op."""
    phases = [kind(name) for name in annotations.open_at(t)][::-1][:depth] if annotations else []
    op = next(ops.open_at(t), None) if ops else None
    return " > ".join(phases + ([op] if op else [])) or "(no span)"


def span_kind(name: str) -> str:
    """A host span's name without its batch's shape: SGLang names each forward
    ``step[MODE bs=B]`` (``toks=T`` for extends), and per-step totals add over shapes."""
    return name.split(" ", 1)[0] + "]" if name.startswith("step[") and " " in name else name


# What a GPU work item is to prefill_intervals: part of a decode step, part of a prefill, or
# neither (sampling, the scheduler's copies, the gate's draft KV writes).
DECODE, PREFILL = "decode", "prefill"


# With the host recorded: the forward step whose span (SGLang's profile_utils.build_step_span_name,
# ``step[MODE bs=B]``) launched it, on any attention backend. The gate's off step is a one-token
# TARGET_VERIFY, a plain server's a DECODE; a speculating gate's drafts are neither.
STEP_ROLES = {"DECODE": DECODE, "TARGET_VERIFY": DECODE, "EXTEND": PREFILL}  # by the span's MODE


def step_role(name: str):
    """A forward step span's role, DECODE or PREFILL, by its MODE (``step[MODE bs=B]``, or
    span_kind's ``step[MODE]``); None for other spans and modes."""
    if not name.startswith("step["):
        return None
    return STEP_ROLES.get(name[len("step["):].split(" ", 1)[0].removesuffix("]"))


# Without the host recorded, on Triton only: its attention kernels by name, extend attention running in
# prefills only and decode attention in every decode step.
EXTEND_ATTENTION, DECODE_ATTENTION = "_fwd_kernel", "_fwd_grouped_kernel_stage1"


KERNEL_ROLES = {DECODE_ATTENTION: DECODE, EXTEND_ATTENTION: PREFILL}


def roles_by_step(events: list[dict], work: list[dict]) -> list | None:
    """Each work item's role by the forward step whose host span launched it; None where the
    trace holds no step spans (no host recorded)."""
    steps = spans_by_thread(events, "user_annotation", lambda name: name.startswith("step["))
    if not steps:
        return None
    launch_of = launches(host_calls(events))

    def role(e: dict):
        launch = launch_of.get(e.get("args", {}).get("correlation"))
        if launch is None or launch["tid"] not in steps:
            return None
        return step_role(next(steps[launch["tid"]].open_at(launch["ts"]), ""))

    return [role(e) for e in work]


def prefill_bounds(events: list[dict], work: list[dict]) -> tuple[list[tuple[int, int]], str]:
    """Each prefill's bounds in ``work``: the last work item of the decode step before it and
    the first of the decode step after it; and how steps were told apart ("step spans" or
    "kernel names", see STEP_ROLES). A prefill is a run of prefill work with no decode work
    among it."""
    roles = roles_by_step(events, work)
    by = "step spans"
    if roles is None:
        roles, by = [KERNEL_ROLES.get(e["name"]) for e in work], "kernel names"
    decode = [i for i, r in enumerate(roles) if r == DECODE]
    return [(before, after) for before, after in zip(decode, decode[1:])
            if PREFILL in roles[before + 1:after]], by
