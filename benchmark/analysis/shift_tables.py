"""The shift scenario's summary: each configuration's output throughput over its rounds, by
domain, and the auto gate against the best fixed N and against upstream's adaptive mode."""

from __future__ import annotations

from statistics import median
from typing import Optional

from benchmark.analysis.markdown_table import fmt, in_order, md_table

AUTO, ADAPTIVE, FIXED_PREFIX = "gate-auto", "upstream-adaptive", "gate-"


def by_config(rows: list[dict]) -> dict[str, list[dict]]:
    """Each configuration's rows in round order, configurations in the order they first ran."""
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["config"], []).append(row)
    return {name: sorted(rs, key=lambda r: r["round"]) for name, rs in out.items()}


def domain_throughput(rows: list[dict]) -> dict[int, float]:
    """Output tok/s while each domain's prompts were sent, over all rounds: the tokens of the
    requests started in its phases over the phases' time."""
    tokens: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for row in rows:
        for phase in row["by_phase"]:
            tokens[phase["domain"]] = tokens.get(phase["domain"], 0) + phase["output_tokens"]
            seconds[phase["domain"]] = seconds.get(phase["domain"], 0) + row["phase_s"]
    return {d: tokens[d] / seconds[d] for d in sorted(tokens)}


def best_fixed(medians: dict[str, float]) -> Optional[tuple[str, float]]:
    """The fixed-N gate (``gate-<N>``) of the highest median and that median; None if none ran."""
    fixed = {name: v for name, v in medians.items() if name.startswith(FIXED_PREFIX) and name != AUTO}
    if not fixed:
        return None
    best = max(fixed, key=fixed.get)
    return best, fixed[best]


def comparisons(medians: dict[str, float]) -> list[tuple[str, float]]:
    """The auto gate's median against the best fixed N's and upstream adaptive's, where both ran."""
    if AUTO not in medians:
        return []
    out = []
    best = best_fixed(medians)
    if best:
        out.append((f"{AUTO} / best fixed N ({best[0]})", medians[AUTO] / best[1]))
    for other in (ADAPTIVE, "plain", "spec"):
        if other in medians:
            out.append((f"{AUTO} / {other}", medians[AUTO] / medians[other]))
    return out


def summary_markdown(rows: list[dict]) -> str:
    configs = by_config(rows)
    medians = {name: median(r["output_throughput"] for r in rs) for name, rs in configs.items()}
    domains = sorted({p["domain"] for r in rows for p in r["by_phase"]})
    table = []
    for name, rs in configs.items():
        per_domain = domain_throughput(rs)
        table.append([name, fmt(medians[name]), in_order([r["output_throughput"] for r in rs], 0),
                      *(fmt(per_domain.get(d), 0) for d in domains),
                      str(sum(r["mismatched"] for r in rs)), str(sum(r["errors"] for r in rs))])
    parts = ["# Workload shift", "",
             "Output tok/s over the whole schedule (median of the rounds, and each round in order), "
             "while each domain's prompts were sent (all rounds), and requests whose greedy output "
             "was not the pair's design (mismatched) or failed.", "",
             md_table(["config", "median tok/s", "rounds", *(f"domain {d}" for d in domains),
                       "mismatched", "errors"], table)]
    compared = comparisons(medians)
    if compared:
        parts += ["", md_table(["comparison", "ratio"], [[what, f"{ratio:.3f}×"] for what, ratio in compared])]
    return "\n".join(parts) + "\n"
