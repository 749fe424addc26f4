"""benchmark/results/README.md: every kept run, by date, under its README's title, and every
removed run with the commit to restore it from.

Seventy-odd run folders are too many to find the latest soak or the last table for a backend by
name alone, and a hand-kept index drifts (vllm-ascend's numbered patch index did). So the index
is written from the folders: each run's README opens with a one-line title that says what it
measured, on which code and with what result; this script lists those titles and a test checks
the committed index is what it writes. Runs no document cites leave the tree but not git: each
is a line of results/removed.tsv (run, a commit that has it, its title), which the index lists.

    python benchmark/results_index.py            # rewrite benchmark/results/README.md
    python benchmark/results_index.py --check    # exit 1 if it is out of date
"""

from __future__ import annotations

import argparse
import re
import sys
from itertools import groupby
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
INDEX = "README.md"
REMOVED = "removed.tsv"
DATE_LEN = len("2026-11-30")

PREAMBLE = """\
# Benchmark results

The runs the project keeps, oldest first: those that the top-level [README](../../README.md),
[docs/benchmarks.md](../../docs/benchmarks.md) and [benchmark/README.md](../README.md) cite. Each
folder holds what the run wrote (the client's JSONL rows, server logs, traces, pytest logs), the
exact command (`command.txt`, or in its README or plan) and a README with what the run showed.
Each run measured the code of its day, not necessarily today's. The runs taken out of the tree
are listed at the end, with how to get each back.

Written by `python benchmark/results_index.py` from each folder's README title and from
`removed.tsv`; a test checks that it is current.
"""

REMOVED_PREAMBLE = """\
## Removed runs

These runs left the tree once no document cited them; git keeps them. Restore one, as it was
committed, from the commit beside it:

```bash
git checkout COMMIT -- benchmark/results/RUN
```

Every commit that touched a run: `git log --all --oneline -- benchmark/results/RUN` (in a
shallow clone, `git fetch --unshallow` first). To remove another run, `git rm -r` it and add its
line to `removed.tsv`: the run, a commit that has it, and its README's title.
"""


def run_title(run: Path) -> str:
    readme = run / INDEX
    if not readme.is_file():
        raise SystemExit(f"{run.name}: no {INDEX}; every run folder needs one, titled '# ...'")
    first = readme.read_text(encoding="utf-8").split("\n", 1)[0]
    if not first.startswith("# "):
        raise SystemExit(f"{readme}: the first line must be its title, '# ...'")
    return first[2:].strip()


def removed_runs(results: Path) -> list[tuple[str, str, str]]:
    """removed.tsv's runs, checked: each is gone from ``results`` and names a commit."""
    path = results / REMOVED
    if not path.is_file():
        return []
    rows = [tuple(line.split("\t")) for line in path.read_text(encoding="utf-8").splitlines()[1:] if line]
    for row in rows:
        if len(row) != 3 or not re.fullmatch(r"[0-9a-f]{7,40}", row[1]):
            raise SystemExit(f"{path}: {row!r}: each line is RUN<TAB>COMMIT<TAB>TITLE")
        if (results / row[0]).exists():
            raise SystemExit(f"{row[0]} is in {REMOVED} but still in {results}: git rm -r it, or drop its line")
    return sorted(rows)


def index_text(results: Path) -> str:
    runs = sorted(p for p in results.iterdir() if p.is_dir())
    sections = [PREAMBLE]
    for date, day_runs in groupby(runs, key=lambda p: p.name[:DATE_LEN]):
        lines = [f"- [{run.name[DATE_LEN + 1:]}]({run.name}/): {run_title(run)}" for run in day_runs]
        sections.append(f"## {date}\n\n" + "\n".join(lines) + "\n")
    removed = removed_runs(results)
    if removed:
        cells = [(run, title.replace("|", "\\|"), commit) for run, commit, title in removed]  # a | would split a cell
        rows = "\n".join(f"| {run} | {title} | {commit} |" for run, title, commit in cells)
        sections.append(REMOVED_PREAMBLE + "\n| run | what it measured | commit |\n|---|---|---|\n" + rows + "\n")
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
