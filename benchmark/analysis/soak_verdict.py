"""A soak's verdict: request outcomes, what the load exercised, the scheduler's answers, the
server log's pool checks, queue and retractions, the gate's switches and memory growth after the
warm-up, each a criterion that passes, fails or is skipped; and the summary in Markdown."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from benchmark.servers.endpoints import gate_delta

# What SGLang's idle pool check logs, or raises in strict mode, when it fails
# (srt/managers/scheduler_components/invariant_checker.py): a leaked KV or request slot, a KV
# page freed twice, a page both owned and free.
POOL_CHECK_FAILURES = ("memory leak detected", "KV double free", "KV page use-after-free")

# The scheduler's log lines that show a burst's effect: its prefill and decode lines report the
# waiting queue (scheduler_components/metrics_reporter.py), and a decode step that finds the KV
# pool full retracts requests back into it (scheduler.py, "KV cache pool is full").
QUEUE_LINE = re.compile(r"#queue-req: (\d+)")
RETRACT_LINE = re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: (\d+)")


def pool_check_failures(log: Path) -> list[str]:
    """The lines of a server log in which SGLang's idle pool check failed."""
    with open(log, errors="replace") as f:
        return [line for line in f if any(message in line for message in POOL_CHECK_FAILURES)]


def queue_and_retractions(log: Path) -> dict:
    """The longest waiting queue the scheduler logged, and the requests it retracted."""
    queued, retracted = 0, 0
    with open(log, errors="replace") as f:
        for line in f:
            if (m := QUEUE_LINE.search(line)):
                queued = max(queued, int(m.group(1)))
            if (m := RETRACT_LINE.search(line)):
                retracted += int(m.group(1))
    return {"max_queue": queued, "retracted": retracted}


def memory_stats(samples: list[dict], key: str, warmup: float, settle: float) -> Optional[dict]:
    """The baseline, last and largest value after it, and their growth over the baseline. The
    baseline is the lowest sample in the ``settle`` seconds after the warm-up, and only samples
    from it on are judged: a sample taken in a stall (a one-time compile can hold a server past
    its warm-up) can sit above the level the server then keeps, and growth measured from it
    would hide as much."""
    timed = [(s["t"], s[key]) for s in samples if s["t"] >= warmup and s.get(key) is not None]
    if len(timed) < 2:
        return None
    settling = [i for i, (t, _) in enumerate(timed) if t < warmup + settle] or [0]
    baseline_at = min(settling, key=lambda i: timed[i][1])  # the first of equal lows
    judged = [value for _, value in timed[baseline_at:]]
    if judged[0] <= 0:
        return None
    first, last, peak = judged[0], judged[-1], max(judged)
    return {"samples": len(judged), "first": first, "last": last, "max": peak,
            "growth": (last - first) / first, "max_growth": (peak - first) / first}


def criterion(name: str, ok: Optional[bool], detail: str) -> dict:
    status = "skip" if ok is None else "pass" if ok else "fail"
    return {"name": name, "status": status, "detail": detail}


def gpu_memory_stats(samples: list[dict], warmup: float, settle: float) -> Optional[dict]:
    """The server's own GPU memory where nvidia-smi attributes it to the server's processes,
    else everything used on the GPUs (then another tenant's memory counts too)."""
    for key, scope in (("server_gpu_memory_mib", "server processes"), ("gpu_memory_mib", "whole GPUs")):
        stats = memory_stats(samples, key, warmup, settle)
        if stats is not None:
            return {"scope": scope, **stats}
    return None


def memory_criterion(name: str, stats: Optional[dict], limit: float) -> dict:
    if stats is None:  # growth unseen is no pass: run the soak on the server's host
        return criterion(name, False, "not measured, or fewer than 2 samples after the warm-up")
    scope = f" ({stats['scope']})" if "scope" in stats else ""
    return criterion(name, stats["max_growth"] <= limit,
                     f"{stats['first']:.0f} -> {stats['last']:.0f} MiB{scope}, largest growth "
                     f"{stats['max_growth']:+.2%} (limit {limit:.0%})")


def host_lengths_criterion(gate: Optional[dict]) -> dict:
    """Every sequence length the gate served plain steps from the host was the GPU's
    (host_seq_lens.py: on FlashInfer, unless turned off)."""
    lengths = gate and gate["after"].get("host_seq_lens")
    if not lengths:
        return criterion("host lengths agreed", None, "the gate served none (Triton, or turned off)")
    return criterion("host lengths agreed", lengths["disagreed"] == 0,
                     f"{lengths['resolved_on_host']} batches served, {lengths['disagreed']} "
                     f"lengths disagreed with the GPU's")


def gate_criterion(gate: Optional[dict], min_switches: int) -> dict:
    """The gate turned speculation off and back on: switches, and steps counted in both modes."""
    if gate is None:
        return criterion("gate switched", False, "the server reports no spec gate")
    delta = gate["delta"]
    return criterion("gate switched",
                     delta["switches"] >= min_switches and delta["decode_steps_plain"] > 0
                     and delta["decode_steps_spec"] > 0,
                     f"{delta['switches']} switches (at least {min_switches}); decode steps "
                     f"{delta['decode_steps_spec']} speculative, {delta['decode_steps_plain']} plain")


def responsive_criterion(samples: list[dict], warmup: float) -> dict:
    """/server_info answered every sample after the warm-up: a scheduler stalled for less
    than a request's timeout would otherwise pass as not hung."""
    judged = [s for s in samples if s["t"] >= warmup]
    errors = [s for s in judged if s["server_info_error"]]
    return criterion("scheduler responsive", not errors,
                     f"/server_info failed in {len(errors)} of {len(judged)} samples after the warm-up"
                     + (f", first at {errors[0]['t']:.0f} s: {errors[0]['server_info_error']}" if errors else ""))


def pool_criterion(failures: Optional[list[str]]) -> dict:
    """SGLang's own check of its pools found them intact (pool_check_failures): a leaked KV slot
    never shows in GPU memory, which the pool holds from the start."""
    name = "pools intact when idle"
    if failures is None:
        return criterion(name, None, "attached server (--url): its log is not read")
    if not failures:
        return criterion(name, True, "SGLang's idle pool check logged no failure, also after the drain")
    return criterion(name, False, f"SGLang's idle pool check failed ({len(failures)} lines in the "
                                  f"server log), first: {failures[0].strip()[:200]}")


def exercised_criteria(exercised: dict[str, int], planned: dict[str, bool]) -> list[dict]:
    """One row per kind of request the load is made of (``exercised``'s keys, client/soak_load.py's
    EXERCISED): some must have done what they were planned for, where the mix plans any."""
    return [criterion(f"exercised: {what}", exercised[what] > 0 if planned[what] else None,
                      f"{exercised[what]} requests" if planned[what] else "none planned")
            for what in exercised]


def burst_criterion(log_stats: Optional[dict], planned: bool) -> dict:
    name = "bursts queued and retracted"
    if not planned:
        return criterion(name, None, "no bursts planned")
    if log_stats is None:
        return criterion(name, None, "attached server (--url): its log is not read")
    return criterion(name, log_stats["max_queue"] > 0 and log_stats["retracted"] > 0,
                     f"longest queue {log_stats['max_queue']}, {log_stats['retracted']} "
                     f"requests retracted")


def verdict(counts: dict[str, int], samples: list[dict], *, alive: tuple[bool, str],
            pool_failures: Optional[list[str]], warmup: float, settle: float,
            max_gpu_growth: float, max_host_growth: float, min_switches: int,
            aborts_planned: bool, exercised: dict[str, int], exercise_planned: dict[str, bool],
            log_stats: Optional[dict], bursts_planned: bool) -> dict:
    """Request outcomes, gate activity and memory against the criteria; ``passed`` if none fails.

    Memory is judged after the warm-up, which should cover a full period of the wave: SGLang's
    allocator and Python's heap grow to the peak load once, and a leak is growth beyond that.
    ``settle`` (a period) is where its baseline is taken (memory_stats). ``pool_failures``: the
    server log's lines from SGLang's idle pool check (pool_check_failures), and ``log_stats`` its
    queue and retractions (queue_and_retractions), None where the log is not ours to read.
    """
    gates = [s["gate"] for s in samples if s["gate"]]
    gate = None if not gates else {"before": gates[0], "after": gates[-1],
                                   "delta": gate_delta(gates[0], gates[-1])}
    memory = {"warmup_s": warmup, "gpu_mib": gpu_memory_stats(samples, warmup, settle),
              "host_rss_mib": memory_stats(samples, "host_rss_mib", warmup, settle)}
    criteria = [
        criterion("server alive", *alive),
        responsive_criterion(samples, warmup),
        pool_criterion(pool_failures),
        *(criterion(f"no {kind} requests", counts[kind] == 0, f"{counts[kind]} {kind}")
          for kind in ("lost", "truncated", "malformed", "hung")),
        criterion("requests completed", counts["completed"] > 0,
                  f"{counts['completed']} completed"),
        criterion("client aborts exercised", counts["aborted"] > 0 if aborts_planned else None,
                  f"{counts['aborted']} aborted by the client" if aborts_planned else "none planned"),
        *exercised_criteria(exercised, exercise_planned),
        burst_criterion(log_stats, bursts_planned),
        gate_criterion(gate, min_switches),
        host_lengths_criterion(gate),
        memory_criterion("GPU memory", memory["gpu_mib"], max_gpu_growth),
        memory_criterion("host memory", memory["host_rss_mib"], max_host_growth),
    ]
    return {"requests": {"total": sum(counts.values()), **counts}, "exercised": exercised,
            "server_log": log_stats, "gate": gate, "memory": memory, "criteria": criteria,
            "passed": all(c["status"] != "fail" for c in criteria)}


def markdown(summary: dict) -> str:
    wave, req = summary["wave"], summary["requests"]
    lines = [
        f"# Soak {summary['name']}: {'PASS' if summary['passed'] else 'FAIL'}",
        "",
        f"{summary['started']}, {summary['elapsed_s']:.0f} s of load ({summary['duration_s']:g} "
        f"planned{', stopped early' if summary['stopped_early'] else ''}) on {summary['url']}, "
        f"commit {summary['commit']}, attention backend {summary['attention_backend']}; "
        f"N = {summary['threshold']}; concurrency {wave['shape']} {wave['low']}..{wave['high']} "
        f"every {wave['period']:g} s"
        + (f", +{wave['burst']} for {wave['burst_s']:g} s of every {wave['burst_every']:g} s"
           if wave["burst"] else "") + ".",
        "",
        "| criterion | result | detail |",
        "|---|---|---|",
        *(f"| {c['name']} | {c['status']} | {c['detail']} |" for c in summary["criteria"]),
        "",
        f"Requests: {req['total']} ("
        + ", ".join(f"{kind} {n}" for kind, n in req.items() if kind != "total") + "); "
        + ", ".join(f"{what} {n}" for what, n in summary["exercised"].items()) + ".",
    ]
    if summary["gate"]:
        d = summary["gate"]["delta"]
        lines.append(f"Gate: {d['switches']} switches; decode steps {d['decode_steps_spec']} "
                     f"speculative, {d['decode_steps_plain']} plain.")
    return "\n".join(lines) + "\n"
