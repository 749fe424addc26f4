"""The report's tables of profiles (profile-*.json): GPU time per step by kernel family, what
each prefill cost, and with ``--profile-host`` where the host's time went."""

from __future__ import annotations

import statistics
from typing import Optional

from benchmark.analysis import kernel_profile
from benchmark.analysis.markdown_table import fmt, md_table


def profile_table(profiles: dict[str, dict], unit: str, with_busy: bool) -> str:
    """GPU kernel time per ``unit`` (a decode step, a prefill wave) of each configuration."""
    plain = profiles.get("plain")
    rows = []
    for name, p in profiles.items():
        fam = p["family_ms_per_step"]
        top = p["top_kernels"][0]
        versus = p["busy_ms_per_step"] / plain["busy_ms_per_step"] if plain else None
        # profiles written before idle_after existed have none
        idle = (p.get("idle_after") or [None])[0]
        rows.append([name, str(p["concurrency"]), fmt(p["busy_ms_per_step"], 2), fmt(versus, 3),
                     fmt(fam["attention"], 2), fmt(fam["gemm"], 2), fmt(fam["other"], 2),
                     *([f"{p['gpu_busy_fraction']:.0%}"] if with_busy else []),
                     f"`{top['name'][:48]}` {fmt(top['ms_per_step'], 2)}",
                     *([f"`{idle['after'][:48]}` {fmt(idle['ms_per_step'], 3)}" if idle else "–"]
                       if with_busy else [])])
    return md_table(["config", "batch", f"GPU ms/{unit}", "vs plain", "attention", "GEMM", "other",
                     *(["GPU busy"] if with_busy else []), f"top kernel (ms/{unit})",
                     *([f"longest idle, after (ms/{unit})"] if with_busy else [])], rows)


IDLE_CAUSE_ROWS = 6  # per configuration; the profile JSON keeps kernel_profile.IDLE_CAUSES_TOP


def idle_causes_table(profiles: dict[str, dict]) -> Optional[str]:
    """With --profile-host: per configuration, its GPU's pauses by what the host was doing."""
    rows = []
    for name, p in profiles.items():
        if "idle_causes" not in p:
            continue
        totals = ", ".join(f"{cause} {fmt(ms, 3)}" for cause, ms in p["idle_ms_per_step_by_cause"].items())
        rows.append([name, "all", totals or "–", "", ""])
        rows += [[name, c["cause"], f"`{c['where']}`", fmt(c["ms_per_step"], 3), fmt(c["pauses_per_step"], 2)]
                 for c in p["idle_causes"][:IDLE_CAUSE_ROWS]]
    if not rows:
        return None
    return md_table(["config", "cause", "host span > op (> wait)", "idle ms/step", "pauses/step"], rows)


def host_time_table(profiles: dict[str, dict]) -> Optional[str]:
    """With --profile-host: per annotated span, each configuration's host time a step, working
    and (in brackets) waiting on the GPU."""
    timed = {name: {row["span"]: row for row in p["host_ms_per_step"]}
             for name, p in profiles.items() if "host_ms_per_step" in p}
    if not timed:
        return None
    spans = list(dict.fromkeys(span for rows in timed.values() for span in rows))
    rows = [[f"`{span}`", *(f"{fmt(by_span[span]['working'], 2)} ({fmt(by_span[span]['waiting'], 2)})"
                            if span in by_span else "–" for by_span in timed.values())]
            for span in spans]
    return md_table(["span", *timed], rows)


def host_pace_table(profiles: dict[str, dict]) -> Optional[str]:
    """With --profile-host: per configuration, the median length of the host calls that every
    server's forwards make alike, and their geometric mean against plain's."""
    paced = {name: p["host_pace_us"] for name, p in profiles.items() if p.get("host_pace_us")}
    if not paced:
        return None
    plain = paced.get("plain")
    rows = []
    for name, pace in paced.items():
        common = [call for call in pace if plain and call in plain]
        versus = statistics.geometric_mean(pace[call] / plain[call] for call in common) if common else None
        rows.append([name, *(fmt(pace.get(call), 2) for call in kernel_profile.PACE_CALLS), fmt(versus, 2)])
    return md_table(["config", *(f"`{call}` µs" for call in kernel_profile.PACE_CALLS), "vs plain"], rows)


def listed(values: Optional[dict]) -> str:
    """A ``{name: number}`` summary as one table cell (traces summarized before it: –)."""
    return " · ".join(f"`{name}` {fmt(n, 1)}" for name, n in values.items()) if values else "–"


def host_calls_table(profiles: dict[str, dict]) -> Optional[str]:
    """With --profile-host: per configuration and kind of forward step, the host calls the
    scheduler made around one and how long it held the host, medians, and where its top-level
    calls were made."""
    rows = [[name, f"`{s['step']}`", str(s["steps"]), fmt(s["calls"], 0), fmt(s["host_ms"], 2),
             listed(s.get("top_level_calls_by_span"))]
            for name, p in profiles.items() for s in p.get("host_calls_per_step") or ()]
    return md_table(["config", "step", "steps", "host calls", "host ms", "top-level calls by span, mean a step"],
                    rows) if rows else None


def step_listing_table(profiles: dict[str, dict], field: str, header: str) -> Optional[str]:
    """With --profile-host: per configuration and kind of forward step, one ``{name: number}``
    field of ``host_calls_per_step`` (traces summarized before that field: no row)."""
    rows = [[name, f"`{s['step']}`", listed(s[field])]
            for name, p in profiles.items() for s in p.get("host_calls_per_step") or ()
            if s.get(field)]
    return md_table(["config", "step", header], rows) if rows else None


def host_ops_table(profiles: dict[str, dict]) -> Optional[str]:
    """The top-level calls that held the host longest, by span and name."""
    return step_listing_table(profiles, "top_level_us_by_op", "span > call, µs a step")


def gpu_by_span_table(profiles: dict[str, dict]) -> Optional[str]:
    """The GPU time each step kind's host spans launched."""
    return step_listing_table(profiles, "gpu_us_by_span", "span: GPU µs a step")


def after_prefill_table(profiles: dict[str, dict]) -> Optional[str]:
    """With --profile-host: per configuration, the median host ms of the decode steps by their
    place after the last prefill (a place no step reached: –; traces summarized before it: no row)."""
    places = kernel_profile.AFTER_PREFILL_PLACES
    rows = [[name, *(fmt(p["host_ms_after_prefill"].get(place), 2) for place in places)]
            for name, p in profiles.items() if p.get("host_ms_after_prefill")]
    return md_table(["config", *places], rows) if rows else None


def prefill_interval_table(profiles: dict[str, dict]) -> str:
    plain = (profiles.get("plain") or {}).get("prefill_intervals")
    rows = []
    for name, p in profiles.items():
        cost = p.get("prefill_intervals")
        if cost is None:
            rows.append([name, "0", "–", "–", "–"])
            continue
        versus = cost["median_interval_ms"] / plain["median_interval_ms"] if plain else None
        rows.append([name, str(cost["prefills"]), fmt(cost["median_interval_ms"], 1), fmt(versus, 2),
                     fmt(cost["median_gpu_busy_ms"], 1)])
    return md_table(["config", "prefills", "median interval ms", "vs plain", "GPU busy in it ms"],
                    rows)
