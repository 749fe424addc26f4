"""Where the GPU time goes, from a torch-profiler trace: per decode step, or per prefill wave.

``sweep.py --profile-concurrency C`` takes the traces (SGLang's ``/start_profile``, GPU activity):
``--profile-steps`` forward steps of steady decode at batch C, and with ``--profile-prefill`` one
wave of C requests sent at once. ``summarize_trace`` turns a trace into ``profile-<config>.json``
or ``profile-prefill-<config>.json``: kernels summed by name and family, GPU busy time per step
(a wave counts as one), how busy the GPU was over the profiled span (idle gaps are CPU-side
cost; meaningless for a wave, whose span includes the client's start), and after which kernels
the GPU sat idle. ``prefill_intervals`` takes a trace of mixed steps apart instead: what each
prefill between two decode steps cost the decoding requests, and how much of that the GPU was busy
(on any backend with the host recorded, on Triton without).
With ``--profile-host`` the trace holds the host too: ``idle_causes`` says for each pause of
the GPU what the host was doing (held by a wait on the GPU, or late), and ``host_time`` how long
each of the scheduler's phases held the host a step.

    python -m benchmark.analysis.kernel_profile trace-plain/*.trace.json.gz trace-gate-9/*.trace.json.gz
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
from collections import Counter
from pathlib import Path

from benchmark.analysis.trace_events import (DECODE, HOST_CALLS, HOST_OPS_AND_CALLS, PREFILL, events_of,
                                            gpu_pauses, gpu_work, host_calls, host_place, host_waits,
                                            launches, prefill_bounds, read_trace, span_kind,
                                            spans_by_thread, step_role)

# Small kernels too: comparing two configurations kernel by kernel (the off state against plain)
# needs them; 12 left out even the decode attention of a prefill wave's profile.
TOP_KERNELS = 40
IDLE_TOP = 8
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


def idle_after(kernels: list[dict], steps: int) -> list[dict]:
    """GPU idle time per step, by the kernel that ran last before each pause: where a step waits."""
    idle_ms: Counter = Counter()
    pauses: Counter = Counter()
    for start, last, after in gpu_pauses(sorted(kernels, key=lambda e: e["ts"])):
        idle_ms[last] += (after["ts"] - start) / 1e3
        pauses[last] += 1
    return [{"after": name, "ms_per_step": ms / steps, "pauses_per_step": pauses[name] / steps}
            for name, ms in idle_ms.most_common(IDLE_TOP)]


IDLE_CAUSES_TOP = 12


def idle_causes(trace, steps: int) -> dict:
    """What the host was doing while the GPU sat idle, from a trace with CPU activity.

    Each pause in the GPU's work (longer than IDLE_GAP_US) ends with work some host call
    launched (the runtime or driver call of the same correlation id). If a host wait (a sync,
    a blocking copy) on that thread was under way when the pause began and returned inside it,
    the GPU had held the host until its queue ran dry, and the pause is the host getting the
    next work out after it: "waited", named by the wait's scheduler span and op. Otherwise the
    host was simply late (a call that began inside the pause is host work, not a wait): "late",
    named by the span and op that launched. Per step: ms of pause and pauses, by cause and
    place."""
    events = events_of(trace)
    work = gpu_work(events)
    calls = host_calls(events)
    launch_of = launches(calls)
    waits = {tid: sorted(w, key=lambda e: e["ts"] + e["dur"]) for tid, w in host_waits(calls).items()}
    wait_ends = {tid: [e["ts"] + e["dur"] for e in w] for tid, w in waits.items()}

    def held_through(tid, start: float, launch: float) -> dict | None:
        """The last wait on ``tid`` under way at ``start`` that returned by ``launch``."""
        ends = wait_ends.get(tid, [])
        for i in range(bisect.bisect_right(ends, launch) - 1, bisect.bisect_right(ends, start) - 1, -1):
            if waits[tid][i]["ts"] < start:
                return waits[tid][i]
        return None

    annotations, ops = spans_by_thread(events, "user_annotation"), spans_by_thread(events, "cpu_op")

    def where(tid, t: float) -> str:
        return host_place(annotations.get(tid), ops.get(tid), t)

    idle_ms: Counter = Counter()
    pauses: Counter = Counter()
    for start, _, after in gpu_pauses(work):
        launch = launch_of.get(after.get("args", {}).get("correlation"))
        if launch is None:
            key = ("unknown", "(no launching call in the trace)")
        else:
            tid = launch["tid"]
            held = held_through(tid, start, launch["ts"])
            key = (("waited", f"{where(tid, held['ts'])} > {held['name']}") if held
                   else ("late", where(tid, launch["ts"])))
        idle_ms[key] += (after["ts"] - start) / 1e3
        pauses[key] += 1
    by_cause: Counter = Counter()
    for (cause, _), ms in idle_ms.items():
        by_cause[cause] += ms
    return {
        "idle_ms_per_step_by_cause": {cause: ms / steps for cause, ms in by_cause.most_common()},
        "idle_causes": [{"cause": cause, "where": place, "ms_per_step": ms / steps,
                         "pauses_per_step": pauses[(cause, place)] / steps}
                        for (cause, place), ms in idle_ms.most_common(IDLE_CAUSES_TOP)],
    }


def host_time(trace, steps: int) -> dict:
    """Host time per step by SGLang's annotated spans (the scheduler loop's phases, each
    forward ``step[MODE]``, the speculative stages within), from a trace with CPU activity:
    how long each held the host, apart from its waits on the GPU (host calls named as in
    ``idle_causes``, IDLE_GAP_US or longer), which are given on their own. Inclusive: a span's
    time holds its nested spans'. What ``idle_causes`` cannot give: where the host's time goes
    whether or not the GPU waited for it."""
    events = events_of(trace)
    waits = {tid: sorted(w, key=lambda e: e["ts"]) for tid, w in host_waits(events).items()}
    wait_starts = {tid: [e["ts"] for e in w] for tid, w in waits.items()}

    def waited_in(span: dict) -> float:
        tid, end = span["tid"], span["ts"] + span["dur"]
        starts = wait_starts.get(tid, [])
        first, last = bisect.bisect_left(starts, span["ts"]), bisect.bisect_left(starts, end)
        return sum(e["dur"] for e in waits[tid][first:last] if e["ts"] + e["dur"] <= end)

    working: Counter = Counter()
    waiting: Counter = Counter()
    for e in events:
        if e.get("cat") == "user_annotation" and e.get("ph") == "X" and "dur" in e:
            kind, waited = span_kind(e["name"]), waited_in(e)
            working[kind] += (e["dur"] - waited) / 1e3
            waiting[kind] += waited / 1e3
    return {"host_ms_per_step": [{"span": name, "working": ms / steps, "waiting": waiting[name] / steps}
                                 for name, ms in working.most_common()]}


# Host calls that both servers' forwards make alike, whatever their code: how long one takes is
# how fast the host ran the server, so compare paces before reading host time.
PACE_CALLS = ("aten::view", "aten::slice", "aten::empty", "cudaLaunchKernel")


def host_pace(trace) -> dict:
    """Median microseconds of each of PACE_CALLS, from a trace with CPU activity."""
    durations: dict = {name: [] for name in PACE_CALLS}
    for e in events_of(trace):
        if e.get("name") in durations and "dur" in e and e.get("cat") in HOST_OPS_AND_CALLS:
            durations[e["name"]].append(e["dur"])
    return {"host_pace_us": {name: statistics.median(d) for name, d in durations.items() if d}}


STEP_SPAN = "scheduler.run_batch"  # the scheduler's span around each forward step it launches
AFTER_PREFILL_PLACES = ("first", "second", "third", "later")
TOP_LEVEL_OPS = 8  # the top-level calls by span and name that host_calls_per_step lists


def host_calls_per_step(trace) -> dict:
    """Per kind of forward step (``span_kind`` of the ``step[...]`` span inside each
    STEP_SPAN): how many host calls (torch ops, nested ones included, and CUDA runtime and
    driver calls) the scheduler made in that span, and how long it held the host, medians over
    the trace, from a trace with CPU activity. Unlike host time, the count does not depend on
    how fast the host ran.
    ``top_level_calls_by_span`` says where they were made: the calls not nested in another
    call, by the innermost annotated span around each (``span_kind``), mean a step, so that
    work done every few steps (the gate's draft KV writes) counts by its share.
    ``top_level_us_by_op``: the same calls by span and name, the TOP_LEVEL_OPS that held the
    host longest, mean microseconds a step: which calls to cut.
    ``gpu_us_by_span``: the GPU work (kernels, copies, memsets) the step span's host calls
    launched, by the innermost annotated span around each launch, mean microseconds a step: what
    the gate's draft KV upkeep costs the GPU next to the forward.
    ``host_ms_after_prefill``: the median host ms of the decode steps by their place after the
    last prefill (first, second, third, later): after a host-bound prefill the GPU waits for the
    first."""
    events = events_of(trace)
    annotations = [e for e in events if e.get("cat") == "user_annotation" and e.get("ph") == "X" and "dur" in e]
    host_ops = sorted((e for e in events if e.get("cat") in HOST_OPS_AND_CALLS and e.get("ph") == "X"),
                      key=lambda e: (e["tid"], e["ts"], -e.get("dur", 0)))
    calls = [(e["tid"], e["ts"]) for e in host_ops]
    top_level_calls = _top_level(host_ops)
    top_level = [(e["tid"], e["ts"]) for e in top_level_calls]
    spans = spans_by_thread(events, "user_annotation")
    steps = sorted((e["tid"], e["ts"], span_kind(e["name"])) for e in annotations if e["name"].startswith("step["))

    def innermost_span(call: dict) -> str:
        return span_kind(next(spans[call["tid"]].open_at(call["ts"])))

    work_us: Counter = Counter()  # by the correlation id of its launching call
    for item in gpu_work(events):
        if "correlation" in item.get("args", {}):
            work_us[item["args"]["correlation"]] += item["dur"]
    by_kind: dict = {}
    where_by_kind: dict = {}
    time_by_kind: dict = {}
    gpu_by_kind: dict = {}
    after_prefill: dict = {}
    steps_since_prefill = None  # None until the trace's first prefill
    for span in sorted((e for e in annotations if e["name"] == STEP_SPAN), key=lambda e: (e["tid"], e["ts"])):
        first, last = (span["tid"], span["ts"]), (span["tid"], span["ts"] + span["dur"])
        inner = steps[bisect.bisect_left(steps, first):bisect.bisect_right(steps, (*last, "~"))]
        if inner:
            kind = inner[0][2]
            count = bisect.bisect_right(calls, last) - bisect.bisect_left(calls, first)
            by_kind.setdefault(kind, []).append((count, span["dur"] / 1e3))
            where = where_by_kind.setdefault(kind, Counter())
            time = time_by_kind.setdefault(kind, Counter())
            for call in top_level_calls[bisect.bisect_left(top_level, first):bisect.bisect_right(top_level, last)]:
                span_name = innermost_span(call)
                where[span_name] += 1
                time[f"{span_name} > {call['name']}"] += call.get("dur", 0)
            gpu = gpu_by_kind.setdefault(kind, Counter())
            for call in host_ops[bisect.bisect_left(calls, first):bisect.bisect_right(calls, last)]:
                correlation = call.get("args", {}).get("correlation")
                if call["cat"] in HOST_CALLS and work_us.get(correlation):
                    gpu[innermost_span(call)] += work_us[correlation]
            role = step_role(kind)
            if role == PREFILL:
                steps_since_prefill = 0
            elif steps_since_prefill is not None and role == DECODE:
                steps_since_prefill += 1
                place = AFTER_PREFILL_PLACES[min(steps_since_prefill, len(AFTER_PREFILL_PLACES)) - 1]
                after_prefill.setdefault(place, []).append(span["dur"] / 1e3)
    return {"host_calls_per_step": [
        {"step": kind, "steps": len(seen), "calls": statistics.median(c for c, _ in seen),
         "host_ms": statistics.median(ms for _, ms in seen),
         "top_level_calls_by_span": {name: round(n / len(seen), 1) for name, n in where_by_kind[kind].most_common()},
         "top_level_us_by_op": {name: round(us / len(seen), 1)
                                for name, us in time_by_kind[kind].most_common(TOP_LEVEL_OPS)},
         "gpu_us_by_span": {name: round(us / len(seen), 1) for name, us in gpu_by_kind[kind].most_common()}}
        for kind, seen in sorted(by_kind.items(), key=lambda item: -len(item[1]))],
        "host_ms_after_prefill": {place: statistics.median(after_prefill[place])
                                  for place in AFTER_PREFILL_PLACES if place in after_prefill}}


def _top_level(host_ops: list[dict]) -> list[dict]:
    """The host calls no other call on their thread holds, from ``host_ops`` sorted by thread,
    start and longest first."""
    top, held_until = [], {}
    for e in host_ops:
        if e["ts"] >= held_until.get(e["tid"], float("-inf")):
            top.append(e)
            held_until[e["tid"]] = e["ts"] + e.get("dur", 0)
    return top


def summarize_trace(trace: dict, steps: int) -> dict:
    """Per-kernel GPU time (ms) of a Chrome trace as written by the torch profiler."""
    kernels = [e for e in events_of(trace) if e.get("cat") == "kernel" and "dur" in e]
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
        "idle_after": idle_after(kernels, steps),
    }


def prefill_intervals(trace: dict) -> tuple[list[dict], str]:
    """What each prefill in a trace of mixed steps costs the decoding requests: the time from
    the decode step before it to the decode step after it, and the GPU time busy in between;
    and how steps were told apart (prefill_bounds). Where GPU busy falls short of the interval,
    the GPU waited on the host: an eager prefill launches every kernel from Python, a breakable
    prefill graph its attention."""
    events = events_of(trace)
    work = gpu_work(events)
    bounds, by = prefill_bounds(events, work)
    intervals = []
    for before, after in bounds:
        start = work[before]["ts"] + work[before]["dur"]
        intervals.append({"interval_ms": (work[after]["ts"] - start) / 1e3,
                          "gpu_busy_ms": sum(e["dur"] for e in work[before + 1:after]) / 1e3})
    return intervals, by


# Where prefill_pauses looks: the scheduler loop's phase, the step or stage in it, and one more
# span (the gate's own), then the op; and how often through each pause.
PAUSE_SPAN_DEPTH = 3
PAUSE_SAMPLE_US = 10
PAUSE_TOP = 15


def prefill_pauses(trace: dict) -> dict:
    """Where the host was while the GPU paused inside prefill intervals, from a trace with CPU
    activity: through each pause, every PAUSE_SAMPLE_US, the spans and op open on the thread
    that launched the most GPU work; in ms per prefill. ``idle_causes`` names the call that
    ended each pause; this is the host work the pause waited through, what a prefill's
    interval loses to its host."""
    events = events_of(trace)
    work = gpu_work(events)
    bounds, by = prefill_bounds(events, work)
    launch_of = launches(host_calls(events))
    threads = Counter(launch_of[e["args"]["correlation"]]["tid"] for e in work
                      if e.get("args", {}).get("correlation") in launch_of)
    if by != "step spans" or not bounds or not threads:
        return {}
    tid = threads.most_common(1)[0][0]
    annotations = spans_by_thread(events, "user_annotation").get(tid)
    ops = spans_by_thread(events, "cpu_op").get(tid)

    sampled: Counter = Counter()
    idle_us = 0.0
    for before, after in bounds:
        for start, _, resumed in gpu_pauses(work[before:after + 1]):
            idle_us += resumed["ts"] - start
            for t in range(int(start), int(resumed["ts"]), PAUSE_SAMPLE_US):
                sampled[host_place(annotations, ops, t, PAUSE_SPAN_DEPTH, span_kind)] += PAUSE_SAMPLE_US
    per_prefill = len(bounds) * 1e3
    return {"prefill_pauses": {
        "prefills": len(bounds), "idle_ms_per_prefill": idle_us / per_prefill,
        "host_ms_per_prefill": [{"where": place, "ms": us / per_prefill}
                                for place, us in sampled.most_common(PAUSE_TOP)]}}


def prefill_interval_summary(trace: dict) -> dict:
    intervals, by = prefill_intervals(trace)
    if not intervals:
        raise ValueError(f"the trace holds no prefill between two decode steps (told apart by {by})")
    return {"prefills": len(intervals),
            **{f"median_{k}": statistics.median(i[k] for i in intervals)
               for k in ("interval_ms", "gpu_busy_ms")},
            "steps_told_by": by}


def summary_line(summary: dict) -> str:
    fam = summary["family_ms_per_step"]
    phase = summary.get("phase", "decode")
    unit, span = (("wave", "") if phase == "prefill"
                  else ("step", f", {summary['gpu_busy_fraction']:.0%} of the span"))
    return (f"{summary['config']} {phase} profile c={summary['concurrency']}: GPU busy "
            f"{summary['busy_ms_per_step']:.2f} ms/{unit} (attention {fam['attention']:.2f}, gemm "
            f"{fam['gemm']:.2f}, other {fam['other']:.2f}){span}")


def main() -> None:
    parser = argparse.ArgumentParser(description="What each prefill of a profiled trace cost "
                                     "(prefill_intervals) and, where it holds the host, how fast "
                                     "the host ran (host_pace), how many host calls each kind of "
                                     "step made (host_calls_per_step) and where the host was while "
                                     "the GPU paused in prefills (prefill_pauses), one JSON line "
                                     "per trace.")
    parser.add_argument("traces", type=Path, nargs="+", help="*.trace.json.gz from /start_profile")
    for path in parser.parse_args().traces:
        trace = read_trace(path)
        print(json.dumps({"trace": str(path), **prefill_interval_summary(trace), **host_pace(trace),
                          **host_calls_per_step(trace), **prefill_pauses(trace)}))


if __name__ == "__main__":
    main()
