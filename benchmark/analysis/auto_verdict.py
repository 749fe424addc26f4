"""The auto gate's verdict at each concurrency C of a sweep (issue 60): its median output
throughput against plain, always-on, the best fixed N and upstream's adaptive mode, the two ratios
the issue judges it by, and the draft steps k it ran there (from the gate's ``/server_info``
snapshots around the level, gate.jsonl's ``before`` and ``after``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from benchmark.analysis.markdown_table import fmt, md_table
from benchmark.analysis.shift_tables import ADAPTIVE, AUTO, FIXED_PREFIX, best_fixed
from benchmark.analysis.sweep_results import Results

NOT_WORSE = 0.98  # auto / max(plain, always-on, best fixed N), at every C
BETTER = 1.05  # auto / max(plain, always-on), somewhere near each crossover


@dataclass(frozen=True)
class AutoLevel:
    """One C: each configuration's median output tok/s there (None: it did not run at C)."""

    c: int
    auto: float
    plain: Optional[float]
    spec: Optional[float]
    best_n: Optional[tuple[str, float]]  # the fixed-N gate of the highest median, and that median
    adaptive: Optional[float]
    steps: Optional[dict[int, int]]  # decode steps the gate ran with each k over the level
    probes: Optional[int]
    best_k: Optional[int]  # the k the gate would run at batch size C after the level

    @property
    def versus_baselines(self) -> Optional[float]:
        """auto / max(plain, always-on), where both ran."""
        if self.plain is None or self.spec is None:
            return None
        return self.auto / max(self.plain, self.spec)

    @property
    def versus_best(self) -> Optional[float]:
        """auto / max(plain, always-on, the best fixed N), where plain and always-on ran."""
        if self.versus_baselines is None:
            return None
        return self.auto / max(self.plain, self.spec, self.best_n[1] if self.best_n else 0.0)


def counter_delta(before: dict, after: dict, key: str) -> Optional[int]:
    return after[key] - before[key] if key in before and key in after else None


def auto_levels(res: Results) -> list[AutoLevel]:
    """Each C the auto gate ran at, from the levels' median runs (``median_level``)."""
    levels = []
    for c, row in sorted(res.closed.get(AUTO, {}).items()):
        medians = {name: by_c[c]["output_throughput"] for name, by_c in res.closed.items() if c in by_c}
        gate = res.gate.get(row["tag"], {})
        before, after = gate.get("before") or {}, gate.get("after") or {}
        steps = None
        if "decode_steps" in before and "decode_steps" in after:
            steps = {int(k): n - before["decode_steps"].get(k, 0) for k, n in after["decode_steps"].items()}
        levels.append(AutoLevel(c, medians[AUTO], medians.get("plain"), medians.get("spec"),
                                best_fixed(medians), medians.get(ADAPTIVE), steps,
                                counter_delta(before, after, "probes"),
                                (after.get("best_by_batch_size") or {}).get(str(c))))
    return levels


def ratio_cell(value: Optional[float], bar: float, miss: str) -> str:
    return "–" if value is None else f"{value:.3f}× {'✓' if value >= bar else miss}".rstrip()


def steps_cell(level: AutoLevel) -> str:
    """The k of the level's decode steps, most run first, with their shares; probes apart."""
    total = sum(level.steps.values()) if level.steps else 0
    if not total:
        return "–"
    shares = sorted(((n, k) for k, n in level.steps.items() if n), reverse=True)
    cell = " · ".join(f"{k}: {100 * n / total:.0f} %" for n, k in shares)
    return cell + (f" (+{level.probes} probes)" if level.probes else "")


def auto_table(levels: list[AutoLevel]) -> str:
    with_adaptive = any(level.adaptive is not None for level in levels)
    rows = []
    for level in levels:
        best = "–" if level.best_n is None else f"{fmt(level.best_n[1])} (N = {level.best_n[0][len(FIXED_PREFIX):]})"
        rows.append([str(level.c), fmt(level.auto), fmt(level.plain), fmt(level.spec), best,
                     *([fmt(level.adaptive)] if with_adaptive else []),
                     ratio_cell(level.versus_best, NOT_WORSE, "✗"),
                     ratio_cell(level.versus_baselines, BETTER, ""),
                     steps_cell(level), "–" if level.best_k is None else str(level.best_k)])
    return md_table(["C", "auto", "plain", "always-on", "best fixed N",
                     *(["upstream adaptive"] if with_adaptive else []),
                     f"auto / max(plain, always-on, best N), ✓ ≥ {NOT_WORSE:g}",
                     f"auto / max(plain, always-on), ✓ ≥ {BETTER:g}",
                     "k run (share of decode steps)", "k best at batch C after"], rows)


def listed(levels: list[AutoLevel], ratio: str) -> str:
    return ", ".join(f"{level.c} ({getattr(level, ratio):.3f}×)" for level in levels)


def verdict_lines(levels: list[AutoLevel]) -> list[str]:
    """Whether auto held 0.98× the best at every C, and where it beat plain and always-on by 5 %."""
    compared = [level for level in levels if level.versus_best is not None]
    unmatched = ", ".join(str(level.c) for level in levels if level.versus_best is None)
    below = [level for level in compared if level.versus_best < NOT_WORSE]
    bar = f"auto ≥ {NOT_WORSE:g}× max(plain, always-on, best fixed N)"
    if below:
        first = f"✗ {bar} not at every C: below it at C = {listed(below, 'versus_best')}."
    elif compared and not unmatched:
        first = f"✓ {bar} at every C ({', '.join(str(level.c) for level in compared)})."
    else:
        first = f"{bar} at every C compared ({', '.join(str(level.c) for level in compared) or 'none'})."
    if unmatched:
        first += f" Not compared at C = {unmatched}: plain or always-on did not run there."
    if not any(level.best_n for level in compared):
        first += " No fixed N ran at those C."
    above = [level for level in compared if level.versus_baselines >= BETTER]
    bar = f"auto ≥ {BETTER:g}× max(plain, always-on)"
    if above:
        second = f"✓ {bar} at C = {listed(above, 'versus_baselines')}."
    elif compared:
        top = max(compared, key=lambda level: level.versus_baselines)
        second = f"{bar} nowhere (at most {top.versus_baselines:.3f}× at C = {top.c})."
    else:
        second = f"{bar}: nowhere compared."
    return [first, second]


def auto_section(res: Results) -> Optional[list[str]]:
    """The report's section on the auto gate, or None where it did not run."""
    levels = auto_levels(res)
    if not levels:
        return None
    return ["## The auto gate (`--speculative-disable-batch-threshold auto`) at each C",
            auto_table(levels),
            "Output tok/s of each level's median run (`median_level`, as every table here). best fixed N: "
            f"the `{FIXED_PREFIX}<N>` configuration with the highest median at that C. k run: "
            "the decode steps the auto gate ran with k draft steps over the level (its drain "
            "included), from the `decode_steps` of its `/server_info` before and after; probes "
            "apart. k best: its `best_by_batch_size` at C after the level (a captured batch "
            "size only).",
            "\n".join(f"- {line}" for line in verdict_lines(levels))]
