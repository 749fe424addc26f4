"""benchmark/results/README.md: every committed run, by date, under its README's title.

Seventy-odd run folders are too many to find the latest soak or the last table for a backend by
name alone, and a hand-kept index drifts (vllm-ascend's numbered patch index did). So the index
is written from the folders: each run's README opens with a one-line title that says what it
measured, on which code and with what result; this script lists those titles and a test checks
the committed index is what it writes.

    python benchmark/results_index.py            # rewrite benchmark/results/README.md
    python benchmark/results_index.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import sys
from itertools import groupby
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
INDEX = "README.md"
DATE_LEN = len("2026-11-30")

PREAMBLE = """\
# Benchmark results

Every run the project committed, oldest first. Each folder holds what the run wrote (the
client's JSONL rows, server logs, traces, pytest logs), the exact command (`command.txt`, or in
its README or plan) and a README with what the run showed. Each run measured the code of its
day, not necessarily today's. Which runs stand for the current code: the top-level
[README](../../README.md) (Speed, GPU tests, Benchmarks) and each plan's header in
[plans/](../plans/).

Written by `python benchmark/results_index.py` from each folder's README title; a test checks
that it is current.
"""


def run_title(run: Path) -> str:
    readme = run / INDEX
    if not readme.is_file():
        raise SystemExit(f"{run.name}: no {INDEX}; every run folder needs one, titled '# ...'")
    first = readme.read_text(encoding="utf-8").split("\n", 1)[0]
    if not first.startswith("# "):
        raise SystemExit(f"{readme}: the first line must be its title, '# ...'")
    return first[2:].strip()


def index_text(results: Path) -> str:
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    sections = [PREAMBLE]
    for date, day_runs in groupby(runs, key=lambda p: p.name[:DATE_LEN]):
        lines = [f"- [{run.name[DATE_LEN + 1:]}]({run.name}/): {run_title(run)}" for run in day_runs]
        sections.append(f"## {date}\n\n" + "\n".join(lines) + "\n")
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the committed index is out of date")
    args = p.parse_args(argv)
    index = RESULTS / INDEX
    text = index_text(RESULTS)
    if args.check:
        if not index.is_file() or index.read_text(encoding="utf-8") != text:
            print(f"{index} is out of date: run python benchmark/results_index.py", file=sys.stderr)
            return 1
        return 0
    index.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
