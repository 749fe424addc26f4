"""The N to pass as --speculative-disable-batch-threshold, from plain and always-on rows.

    python benchmark/find_threshold.py RUN_DIR [RUN_DIR ...] [--plain PLAIN_RUN_DIR]

One line per run; sweep one run per target/draft pair, so each line is one accept-length
setting (the measured accept length is shown next to it). Pairs that share the target can
share one plain run: sweep them with ``--configs spec`` and pass that run as ``--plain``.

Method. r(C) = spec / plain output tok/s at each concurrency C measured for both.
* Measured N: the largest C such that r > 1 at C and at every smaller level. The gate
  speculates for every batch of at most N requests, so the gain must hold all the way down;
  when spec wins again above a loss, the line says so (noise: rerun with more prompts).
* Crossover C*: r interpolated linearly in log2(C) between that level and the next one, where
  r reaches 1.
* Suggested N = max(measured N, floor(C*)): near C* both paths are about as fast, so an error
  there costs little. In closed loop the decode batch is about C (a little less while requests
  sit in prefill), which is why a concurrency stands in for a batch size.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from benchmark.analysis.markdown_table import md_table
from benchmark.analysis.sweep_results import load


@dataclass(frozen=True)
class Crossover:
    measured: Optional[int]  # None: spec never beats plain, not even at the lowest level
    crossover: Optional[float]  # None: no level where plain catches up (or spec never wins)
    non_monotone: bool  # spec beats plain again at some level above the first loss

    @property
    def suggested(self) -> Optional[int]:
        if self.measured is None:
            return None
        if self.crossover is None:
            return self.measured
        return max(self.measured, math.floor(self.crossover))


def find_crossover(ratios: dict[int, float]) -> Crossover:
    """``ratios``: concurrency -> spec / plain output throughput."""
    cs = sorted(ratios)
    losses = [i for i, c in enumerate(cs) if ratios[c] <= 1]
    first_loss = losses[0] if losses else len(cs)
    non_monotone = any(ratios[c] > 1 for c in cs[first_loss:])
    if first_loss == 0:
        return Crossover(None, None, non_monotone)
    win = cs[first_loss - 1]
    if first_loss == len(cs):
        return Crossover(win, None, False)
    loss = cs[first_loss]
    r_win, r_loss = ratios[win], ratios[loss]
    t = (r_win - 1) / (r_win - r_loss)
    crossover = 2 ** (math.log2(win) + t * (math.log2(loss) - math.log2(win)))
    return Crossover(win, crossover, non_monotone)


def verdict(x: Crossover, largest: int) -> str:
    if x.measured is None:
        return "none: spec never beats plain here; serve without speculation"
    if x.crossover is None:
        return f">= {largest}: spec wins at every level; measure higher concurrency"
    note = " (spec wins again above the first loss: noisy, rerun)" if x.non_monotone else ""
    return f"{x.suggested}{note}"


def spec_plain_ratios(run: Path, plain_run: Optional[Path] = None) -> tuple[dict[int, float], list[float]]:
    """Concurrency -> spec / plain output tok/s at the levels both measured, and the spec rows'
    accept lengths."""
    res = load([run])
    spec = res.closed.get("spec", {})
    plain = (load([plain_run]) if plain_run else res).closed.get("plain", {})
    ratios = {c: spec[c]["output_throughput"] / plain[c]["output_throughput"]
              for c in sorted(plain.keys() & spec.keys())}
    return ratios, [r["accept_length"] for r in spec.values() if r.get("accept_length")]


def run_line(run: Path, plain_run: Optional[Path]) -> Optional[list[str]]:
    ratios, accept = spec_plain_ratios(run, plain_run)
    if not ratios:
        return None
    x = find_crossover(ratios)
    return [
        run.name,
        f"{statistics.median(accept):.2f}" if accept else "–",
        ", ".join(f"{c}: {r:.2f}" for c, r in ratios.items()),
        "–" if x.crossover is None else f"{x.crossover:.1f}",
        verdict(x, max(ratios)),
    ]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="sweep results directories")
    parser.add_argument("--plain", type=Path,
                        help="take the plain rows from this run (same target and settings)")
    args = parser.parse_args(argv)
    rows = []
    for run in args.runs:
        line = run_line(run, args.plain)
        if line is None:
            print(f"{run}: no concurrency level with both plain and spec rows")
        else:
            rows.append(line)
    if rows:
        print(md_table(["run", "accept len (spec)", "spec / plain at C", "crossover C*",
                        "--speculative-disable-batch-threshold"], rows))
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
