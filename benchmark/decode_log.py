"""Steady-state decode throughput of a load level, from the scheduler's decode log lines.

SGLang logs a line every ``--decode-log-interval`` (40) decode steps, e.g.
``Decode batch, #running-req: 64, ... gen throughput (token/s): 8747.66, ...``: the tokens of
those steps over the wall time since the previous line, prefills in between included. The lines
whose batch is near the level's concurrency are its steady state, without the ramp-up and the
drain. That is where a gated server runs its off path, so comparing their median with a plain
server's measures what being off costs; a closed-loop run's tok/s also counts the drain at its
end, where the batch falls under N and the gate speculates again.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Optional

DECODE_LINE = re.compile(r"Decode batch, #running-req: (\d+),.*?gen throughput \(token/s\): ([\d.]+)")
PREFILL_LINE = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+)")
# A closed loop refills a finished request's slot after its prefill, so the batch sits a little
# under C while the level runs; 90 % of C keeps the steady state and drops the drain.
FULL_BATCH = 0.9


def decode_intervals(log_text: str) -> list[tuple[int, float, bool]]:
    """Each decode line's (running requests, gen tok/s, whether a prefill ran in its interval)."""
    intervals, prefilled = [], False
    for line in log_text.splitlines():
        if PREFILL_LINE.search(line):
            prefilled = True
        elif match := DECODE_LINE.search(line):
            intervals.append((int(match[1]), float(match[2]), prefilled))
            prefilled = False
    return intervals


def prefill_batches(log_text: str) -> dict:
    """How a level's arrivals were grouped into prefill batches: how many batches, and the
    requests and prompt tokens they prefilled (a chunked prompt counts in each of its chunks).
    At C = max running requests two servers can group the same arrivals differently, and every
    batch interrupts decoding (benchmark/results/2026-12-01-offcost-8b-2.2-write-graph)."""
    batches = [(int(requests), int(tokens)) for requests, tokens in PREFILL_LINE.findall(log_text)]
    return {"batches": len(batches), "requests": sum(r for r, _ in batches),
            "tokens": sum(t for _, t in batches)}


def _median(values: list[float]) -> Optional[dict]:
    return {"lines": len(values), "median_tok_s": statistics.median(values)} if values else None


def steady_throughput(log_text: str, concurrency: int, at_most: Optional[int] = None) -> Optional[dict]:
    """Median gen throughput of the decode lines with at least 90 % of ``concurrency`` running
    (and at most ``at_most``). ``decode_only``: the same over the intervals no prefill
    interrupted, which measures a decode step alone: at full batch the two servers' prefills
    can come at different rates (a closed loop with one output length keeps plain's requests
    finishing in waves, and anything that desynchronizes them brings more, smaller prefills)."""
    steady = [(tok_s, prefilled) for running, tok_s, prefilled in decode_intervals(log_text)
              if FULL_BATCH * concurrency <= running <= (at_most or running)]
    if not steady:
        return None
    return {**_median([tok_s for tok_s, _ in steady]),
            "decode_only": _median([tok_s for tok_s, prefilled in steady if not prefilled])}


def read_from(path: Path, offset: int) -> str:
    """What was appended to a log since it was ``offset`` bytes long."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def main(argv: Optional[list[str]] = None) -> None:
    from sweep import int_list  # here: sweep imports this module

    p = argparse.ArgumentParser(description="Steady decode throughput of each concurrency level in "
                                "a whole server log (a level's lines: 90 to 100 % of C running).")
    p.add_argument("server_log", type=Path)
    p.add_argument("--concurrency", required=True, type=int_list,
                   help="comma-separated levels, e.g. 16,32,64,128")
    args = p.parse_args(argv)
    text = args.server_log.read_text(errors="replace")
    print(json.dumps({c: steady_throughput(text, c, at_most=c) for c in args.concurrency}, indent=1))


if __name__ == "__main__":
    main()
