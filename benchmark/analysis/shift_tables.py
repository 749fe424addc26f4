"""The shift scenario's summary: each configuration's output throughput over its rounds, by
domain, and the auto gate against the best fixed N and against upstream's adaptive mode; then
each (domain, concurrency) segment, and the best configuration of each segment put together: the
most a gate choosing among these configurations' behaviours segment by segment could make."""

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


def segment_throughput(rows: list[dict]) -> dict[tuple[int, int], float]:
    """Output tok/s in each (domain, concurrency) segment over all rounds: the tokens of the
    requests started in it over its seconds. Empty for rows written before segments were."""
    if not all("by_segment" in row for row in rows):
        return {}
    tokens: dict[tuple[int, int], float] = {}
    seconds: dict[tuple[int, int], float] = {}
    for row in rows:
        for segment in row["by_segment"]:
            key = (segment["domain"], segment["concurrency"])
            tokens[key] = tokens.get(key, 0) + segment["output_tokens"]
            seconds[key] = seconds.get(key, 0) + segment["seconds"]
    return {key: tokens[key] / seconds[key] for key in sorted(tokens)}


def segments_markdown(configs: dict[str, list[dict]]) -> list[str]:
    """The segments' table and what the best of each segment makes against auto and the best
    fixed N, all from segment throughputs (the tail after the schedule's end left out)."""
    rates = {name: segment_throughput(rs) for name, rs in configs.items()}
    if not all(rates.values()):
        return []
    first = next(iter(configs.values()))[0]
    seconds = {(s["domain"], s["concurrency"]): s["seconds"] for s in first["by_segment"]}
    best = {key: max(rate.get(key, 0.0) for rate in rates.values()) for key in seconds}
    table = [[str(domain), str(c), fmt(seconds[(domain, c)], 0),
              *(f"**{fmt(rates[name].get((domain, c)), 0)}**" if rates[name].get((domain, c)) == best[(domain, c)]
                else fmt(rates[name].get((domain, c)), 0) for name in rates)]
             for domain, c in sorted(seconds)]
    overall = {name: schedule_throughput(rate, seconds) for name, rate in rates.items()}
    ceiling = schedule_throughput(best, seconds)
    compared = [("best of each segment / " + name, ceiling / value) for name, value in overall.items() if value]
    fixed = best_fixed(overall)
    if AUTO in overall and fixed:
        compared.insert(0, (f"{AUTO} / best fixed N ({fixed[0]}), over the segments", overall[AUTO] / fixed[1]))
    any_n = best_fixed_from_plain_and_spec(rates, seconds)
    if AUTO in overall and any_n:
        compared.insert(0, (f"{AUTO} / best fixed N put together from plain and spec ({any_n[0]})",
                            overall[AUTO] / any_n[1]))
    return ["", "Output tok/s in each segment of the schedule (domain, closed-loop concurrency C; the "
            "requests started in it, all rounds), the best of each in bold. Put together, the best of "
            f"each segment makes {fmt(ceiling, 0)} tok/s over the schedule.", "",
            md_table(["domain", "C", "s a round", *rates], table), "",
            md_table(["comparison", "ratio"], [[what, f"{ratio:.3f}×"] for what, ratio in compared])]


def schedule_throughput(rate: dict[tuple[int, int], float], seconds: dict[tuple[int, int], float]) -> float:
    """Output tok/s over the schedule from each segment's rate and seconds."""
    return sum(rate.get(key, 0.0) * s for key, s in seconds.items()) / sum(seconds.values())


def best_fixed_from_plain_and_spec(rates: dict[str, dict], seconds: dict[tuple[int, int], float]
                                   ) -> Optional[tuple[str, float]]:
    """Every fixed N at once, from plain's and always-on's segments: N speculates at the levels up
    to N and decodes plainly above, so the levels divide all N into a few behaviours. The best of
    them, named by its range of N, and what it makes; None unless plain and spec both ran. A
    gate's off steps cost a little more than plain's, so this flatters the fixed N."""
    if not {"plain", "spec"} <= rates.keys():
        return None
    levels = sorted({c for _, c in seconds})
    made = {}
    for i, n in enumerate([0, *levels]):
        label = (f"N < {levels[0]}, plain" if i == 0 else f"N ≥ {n}, always on" if i == len(levels)
                 else f"N = {n}…{levels[i] - 1}")
        made[label] = schedule_throughput(
            {key: rates["spec" if key[1] <= n else "plain"].get(key, 0.0) for key in seconds}, seconds)
    best = max(made, key=made.get)
    return best, made[best]


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
    parts += segments_markdown(configs)
    return "\n".join(parts) + "\n"
