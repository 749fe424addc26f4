"""The report's tables of closed levels, the envelope, each gate against plain, repeated levels
and the bursty scenario."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Iterable, Optional

from benchmark.analysis.markdown_table import fmt, in_order, md_table
from benchmark.analysis.sweep_results import Results, config_of, repeat_of, tag_fields


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as numpy.percentile's default."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def p50_p99(values: list[float]) -> str:
    return f"{fmt(percentile(values, 50))} / {fmt(percentile(values, 99))}" if values else "–"


def p99(values: list[float]) -> str:
    return fmt(percentile(values, 99), 2) if values else "–"


def gate_cells(delta: Optional[dict]) -> list[str]:
    if delta is None:
        return ["–", "–"]
    return [f"{delta['decode_steps_spec']} / {delta['decode_steps_plain']}", str(delta["switches"])]


def closed_table(res: Results) -> str:
    rows = []
    for name, by_c in res.closed.items():
        for c, r in sorted(by_c.items()):
            delta = res.gate.get(r["tag"], {}).get("delta")
            rows.append([
                name, str(c), fmt(r["output_throughput"]),
                f"{fmt(r['median_ttft_ms'])} / {fmt(r['p99_ttft_ms'])}",
                f"{fmt(r['median_tpot_ms'], 2)} / {fmt(r['p99_tpot_ms'], 2)}",
                f"{fmt(r['median_itl_ms'], 2)} / {fmt(r['p99_itl_ms'], 2)}",
                fmt(r.get("accept_length"), 2), *gate_cells(delta),
            ])
    return md_table(["config", "C", "out tok/s", "TTFT p50 / p99 ms", "TPOT p50 / p99 ms",
                     "ITL p50 / p99 ms", "accept len", "steps spec / plain", "switches"], rows)


def host_lengths_table(res: Results) -> Optional[str]:
    """Each gated level's host sequence lengths, where the gate served them (FlashInfer)."""
    rows = []
    for name in res.gated():
        for c, r in sorted(res.closed[name].items()):
            lengths = (res.gate.get(r["tag"], {}).get("delta") or {}).get("host_seq_lens")
            if lengths:
                rows.append([name, str(c), str(lengths["resolved_on_host"]),
                             str(lengths["copied_back"]), str(lengths["disagreed"])])
    return md_table(["config", "C", "batches from the host", "batches copied back",
                     "lengths disagreeing"], rows) if rows else None


def envelope_table(res: Results) -> str:
    env = res.envelope()
    gated = res.gated()
    rows = []
    for c, best in env.items():
        cells = [str(c), fmt(res.closed["plain"][c]["output_throughput"]),
                 fmt(res.closed["spec"][c]["output_throughput"]), fmt(best)]
        for name in gated:
            row = res.closed[name].get(c)
            tput = None if row is None else row["output_throughput"]
            cells.append("–" if tput is None else f"{fmt(tput)} ({tput / best:.2f}×)")
        rows.append(cells)
    return md_table(["C", "plain", "spec", "max(plain, spec)", *gated], rows)


@dataclass(frozen=True)
class BurstyStats:
    requests: int
    good: int
    seconds: float  # nominal length of the scenario: the sum of its phases
    ttft_ms: list[float]
    tpot_ms: list[float]

    @property
    def goodput(self) -> float:
        return self.good / self.seconds


def bursty_stats(phases: list[dict], slo_ttft_ms: float, slo_tpot_ms: float) -> BurstyStats:
    """Per-request TTFT and TPOT from the sweep's bursty rows (``decode_s``: see
    client/bursty.py's compact_details); a request is good when it succeeded and met both SLOs.
    TPOT is the client's definition: decode time / (output tokens - 1)."""
    requests = good = 0
    ttfts, tpots = [], []
    for row in phases:
        for ttft, decode_s, out_len, error in zip(row["ttfts"], row["decode_s"],
                                                  row["output_lens"], row["errors"]):
            requests += 1
            if error:
                continue
            ttft_ms = ttft * 1000
            tpot_ms = decode_s * 1000 / (out_len - 1) if out_len > 1 else None
            ttfts.append(ttft_ms)
            if tpot_ms is not None:
                tpots.append(tpot_ms)
            good += ttft_ms <= slo_ttft_ms and (tpot_ms is None or tpot_ms <= slo_tpot_ms)
    seconds = sum(float(tag_fields(r["tag"])["s"]) for r in phases)
    return BurstyStats(requests, good, seconds, ttfts, tpots)


def bursty_tables(res: Results, slo_ttft_ms: float, slo_tpot_ms: float) -> str:
    rows = []
    for name, phases in res.bursty.items():
        st = bursty_stats(phases, slo_ttft_ms, slo_tpot_ms)
        rows.append([
            name, str(st.requests), f"{100 * st.good / max(st.requests, 1):.1f} %",
            f"{st.goodput:.2f}", p50_p99(st.ttft_ms), p50_p99(st.tpot_ms),
            *gate_cells(res.gate.get(f"{name},bursty", {}).get("delta")),
        ])
    overall = md_table(["config", "requests", "SLO met", "goodput req/s", "TTFT p50 / p99 ms",
                        "TPOT p50 / p99 ms", "steps spec / plain", "switches"], rows)
    first = next(iter(res.bursty.values()))
    header = ["config"] + [f"phase {k}: {tag_fields(r['tag'])['rate']} req/s"
                           for k, r in enumerate(first)]
    per_phase = md_table(header, [
        [name] + [p99(bursty_stats([r], slo_ttft_ms, slo_tpot_ms).tpot_ms) for r in phases]
        for name, phases in res.bursty.items()
    ])
    return f"{overall}\n\np99 TPOT (ms) of the requests sent in each phase:\n\n{per_phase}"


def setup_line(res: Results) -> str:
    """What was measured, from the server_info that the client embedded in a row."""
    rows = [r for by_c in res.closed.values() for r in by_c.values()]
    rows += [r for phases in res.bursty.values() for r in phases]
    spec_rows = [r for r in rows if (r.get("server_info") or {}).get("speculative_algorithm")]
    info = (spec_rows or rows)[0].get("server_info") or {}
    topk = info.get("speculative_eagle_topk") or 1
    tree = f" of a tree (topk {topk}, {info.get('speculative_num_draft_tokens')} draft tokens)" if topk > 1 else ""
    return (f"target `{info.get('model_path')}`, "
            f"draft `{info.get('speculative_draft_model_path')}`, "
            f"{info.get('speculative_num_steps')} draft steps{tree}, "
            f"{output_lengths(rows[0])}, "
            f"max running requests {info.get('max_running_requests')}, "
            f"SGLang {info.get('version')}")


def output_lengths(row: dict) -> str:
    fixed = row.get("sharegpt_output_len")
    if fixed:
        return f"output {fixed} tokens per request"
    mean = row["total_output_tokens"] / max(row["completed"], 1)
    return f"output lengths from the prompts' answers (mixed, {mean:.0f} tokens a request on average)"


def versus_plain_table(res: Results) -> str:
    """Each gate against the plain server where the gate is off: the cost of being off."""
    rows = []
    for name, c, gated, base in res.against_plain():
        levels = [res.gate.get(row["tag"], {}) for row in (gated, base)]
        steady = [level.get("steady_decode") or {} for level in levels]
        prefills = [level.get("prefills") for level in levels]
        rows.append([name, str(c), fmt(gated["output_throughput"] / base["output_throughput"], 3),
                     fmt(gated["median_tpot_ms"] / base["median_tpot_ms"], 3),
                     fmt(median_ratio(*steady), 3),
                     fmt(median_ratio(*(part.get("decode_only") for part in steady)), 3),
                     fmt(gated["mean_ttft_ms"] / base["mean_ttft_ms"], 3),
                     " / ".join(str(p["batches"]) for p in prefills) if all(prefills) else "–",
                     prefill_cost_pair(*(part.get("prefill_cost") for part in steady))])
    return md_table(["config", "C", "tok/s vs plain", "median TPOT vs plain",
                     "steady decode tok/s vs plain", "decode only", "mean TTFT vs plain",
                     "prefill batches gated / plain", "ms a step, a prefill: gated / plain"], rows)


def order_balanced_table(runs: dict[str, Results]) -> str:
    """Each gate against plain in sweeps that started the servers in different orders (one
    directory each, plans/start_order.sh): its medians' ratio in each, and their geometric
    mean, which cancels what the start order alone does to a server's host."""
    ratios: dict[tuple[str, int], dict[str, list[float]]] = {}
    for res in runs.values():
        for name, c, gated, base in res.against_plain():
            seen = ratios.setdefault((name, c), {"tok/s": [], "TPOT": []})
            seen["tok/s"].append(gated["output_throughput"] / base["output_throughput"])
            seen["TPOT"].append(gated["median_tpot_ms"] / base["median_tpot_ms"])

    def balanced(values: list[float]) -> str:
        return fmt(statistics.geometric_mean(values), 3) if len(values) == len(runs) else "–"

    rows = [[name, str(c), *(cell for key in ("tok/s", "TPOT")
                             for cell in (in_order(seen[key], 3), balanced(seen[key])))]
            for (name, c), seen in sorted(ratios.items())]
    return md_table(["config", "C", f"tok/s vs plain, {' · '.join(runs)}", "order-balanced",
                     "median TPOT vs plain, in the same order", "order-balanced"], rows)


def prefill_cost_pair(gated: Optional[dict], base: Optional[dict]) -> str:
    if not (gated and base):
        return "–"
    return (f"{gated['step_ms']:.2f}, {gated['per_prefill_ms']:.1f} / "
            f"{base['step_ms']:.2f}, {base['per_prefill_ms']:.1f}")


def median_ratio(gated: Optional[dict], base: Optional[dict]) -> Optional[float]:
    return gated["median_tok_s"] / base["median_tok_s"] if gated and base else None


def repeats_table(res: Results) -> str:
    rows = []
    for name, by_c in res.repeats.items():
        for c, levels in sorted(by_c.items()):
            tput = [r["output_throughput"] for r in levels]
            rows.append([name, str(c), in_order(tput, 1),
                         fmt(res.closed[name][c]["output_throughput"]), f"{100 * (max(tput) / min(tput) - 1):.1f} %"])
    return md_table(["config", "C", "out tok/s of each run, in order", "median", "max / min − 1"], rows)


RUN_BY_RUN_LATENCIES = ("median_tpot_ms", "median_itl_ms", "mean_ttft_ms")


def run_by_run_rows(res: Results) -> list[list[str]]:
    """Each gate's repeated level against plain's run of the same number, the pairs that
    ``sweep.py --interleave`` ran side by side: throughput, and the latencies that item 3 of
    issue 3 judges too (TPOT, with the median of its runs' ratios), or that say where a
    difference comes from: a decode step (ITL), or prefills (TTFT). The median runs alone hide
    how far runs spread."""
    plain = res.repeats.get("plain", {})
    rows = []
    for name in res.gated():
        for c, levels in sorted(res.repeats.get(name, {}).items()):
            base = {repeat_of(r["tag"]): r for r in plain.get(c, [])}
            pairs = [(r, base[repeat_of(r["tag"])]) for r in levels if repeat_of(r["tag"]) in base]
            if not pairs:
                continue
            tok_s, tpot, *latencies = ([run[m] / plain_run[m] for run, plain_run in pairs]
                                       for m in ("output_throughput", *RUN_BY_RUN_LATENCIES))
            rows.append([name, str(c), in_order(tok_s, 3), fmt(statistics.median(tok_s), 3),
                         fmt(min(tok_s), 3), fmt(max(tok_s), 3), in_order(tpot, 3),
                         fmt(statistics.median(tpot), 3), *(in_order(r, 3) for r in latencies)])
    return rows


def against_plain_table(res: Results, field: str, keys: Iterable[str], headers: list[str],
                        digits: int = 1) -> str:
    """Each reported closed level's ``field`` (a dict in its gate.jsonl row) by key, with the
    ratio to plain's at that C."""
    reported = [res.gate.get(r["tag"], {}) for by_c in res.closed.values() for r in by_c.values()]
    rows_with_field = [row for row in reported if row.get(field)]
    plain = {row["max_concurrency"]: row[field] for row in rows_with_field
             if config_of(row["tag"]) == "plain"}
    rows = []
    for row in rows_with_field:
        name, c = config_of(row["tag"]), row["max_concurrency"]
        cells = []
        for key in keys:
            value, base = row[field].get(key), plain.get(c, {}).get(key)
            versus = f" ({value / base:.2f}×)" if name != "plain" and value and base else ""
            cells.append(fmt(value, digits) + versus)
        rows.append([name, str(c), *cells])
    return md_table(["config", "C", *headers], rows)
