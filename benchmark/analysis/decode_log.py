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
from typing import NamedTuple, Optional

from benchmark.cli import int_list

DECODE_LINE = re.compile(r"Decode batch, #running-req: (\d+),.*?gen throughput \(token/s\): ([\d.]+)")
ACCEPT_LENGTH = re.compile(r"accept len: ([\d.]+)")  # speculative servers' lines only
PREFILL_LINE = re.compile(r"Prefill batch, #new-seq: (\d+), #new-token: (\d+)")
# A closed loop refills a finished request's slot after its prefill, so the batch sits a little
# under C while the level runs; 90 % of C keeps the steady state and drops the drain.
FULL_BATCH = 0.9
DECODE_LOG_INTERVAL = 40  # decode steps a line covers: SGLang's default, which sweep.py keeps
# An interval this many times the median holds more than decoding and prefills (a level's edges).
OUTLIER_INTERVAL = 2.5


class Interval(NamedTuple):
    """The decode steps one log line covers."""

    running: int  # requests in the batch
    tok_s: float  # gen throughput over the interval, prefills in it included
    prefills: int  # prefill batches logged in the interval
    accept: float  # tokens a request gained a step: 1 for a plain server

    def duration_ms(self) -> float:
        return 1000 * DECODE_LOG_INTERVAL * self.running * self.accept / self.tok_s


def decode_intervals(log_text: str) -> list[Interval]:
    intervals, prefills = [], 0
    for line in log_text.splitlines():
        if PREFILL_LINE.search(line):
            prefills += 1
        elif match := DECODE_LINE.search(line):
            accept = ACCEPT_LENGTH.search(line)
            intervals.append(Interval(int(match[1]), float(match[2]), prefills,
                                      float(accept[1]) if accept else 1.0))
            prefills = 0
    return intervals


def prefill_cost(intervals: list[Interval]) -> Optional[dict]:
    """What a prefill batch costs the decoding requests: a least-squares line through the
    intervals' durations against the prefill batches in each. ``step_ms``: a decode step alone
    (the intercept over the interval's steps); ``per_prefill_ms``: the slope: where two servers'
    whole runs differ more than their decode steps do. None unless some intervals hold a prefill
    and some do not."""
    points = [(i.prefills, i.duration_ms()) for i in intervals if i.tok_s > 0]
    if not points:
        return None
    typical = statistics.median(ms for _, ms in points)
    points = [(prefills, ms) for prefills, ms in points if ms <= OUTLIER_INTERVAL * typical]
    if len({prefills for prefills, _ in points}) < 2 or min(prefills for prefills, _ in points) > 0:
        return None
    slope, intercept = statistics.linear_regression(*zip(*points))
    return {"intervals": len(points), "step_ms": round(intercept / DECODE_LOG_INTERVAL, 3),
            "per_prefill_ms": round(slope, 2)}


def prefill_batches(log_text: str) -> dict:
    """How a level's arrivals were grouped into prefill batches: how many batches, and the
    requests and prompt tokens they prefilled (a chunked prompt counts in each of its chunks).
    At C = max running requests two servers can group the same arrivals differently, and every
    batch interrupts decoding."""
    batches = [(int(requests), int(tokens)) for requests, tokens in PREFILL_LINE.findall(log_text)]
    return {"batches": len(batches), "requests": sum(r for r, _ in batches),
            "tokens": sum(t for _, t in batches)}


def _median(values: list[float]) -> Optional[dict]:
    return {"lines": len(values), "median_tok_s": statistics.median(values)} if values else None


def level_intervals(log_text: str, concurrency: int, at_most: Optional[int] = None) -> list[Interval]:
    """The intervals of a level's steady state: at least 90 % of ``concurrency`` running (and at
    most ``at_most``)."""
    return [i for i in decode_intervals(log_text) if FULL_BATCH * concurrency <= i.running <= (at_most or i.running)]


def steady_throughput(log_text: str, concurrency: int, at_most: Optional[int] = None) -> Optional[dict]:
    """Median gen throughput of the decode lines with at least 90 % of ``concurrency`` running
    (and at most ``at_most``). ``decode_only``: the same over the intervals no prefill
    interrupted, which measures a decode step alone: at full batch the two servers' prefills
    can come at different rates (a closed loop with one output length keeps plain's requests
    finishing in waves, and anything that desynchronizes them brings more, smaller prefills).
    ``prefill_cost``: those intervals' ``prefill_cost``."""
    steady = level_intervals(log_text, concurrency, at_most)
    if not steady:
        return None
    return {**_median([i.tok_s for i in steady]),
            "decode_only": _median([i.tok_s for i in steady if not i.prefills]),
            "prefill_cost": prefill_cost(steady)}


def step_ms(log_text: str, concurrency: int, min_accept: Optional[float] = None) -> Optional[dict]:
    """What one decode step took at a level, for setting live steps beside a cost table: the
    median over the level's intervals (90 to 100 % of ``concurrency`` running) of plain steps
    (accept length 1) or, given ``min_accept``, of drafting steps that accepted at least that on
    average (an interval mixing both falls in neither). ``step_ms`` counts the prefills the
    intervals held (``prefills_per_line``); ``decode_only_step_ms`` leaves out the intervals
    that held one, where any are left."""
    def wanted(i: Interval) -> bool:
        return i.accept >= min_accept if min_accept is not None else i.accept == 1.0
    steps = [i for i in level_intervals(log_text, concurrency, concurrency) if i.tok_s > 0 and wanted(i)]
    if not steps:
        return None
    def median_step(intervals: list[Interval]) -> Optional[float]:
        ms = [i.duration_ms() / DECODE_LOG_INTERVAL for i in intervals]
        return round(statistics.median(ms), 3) if ms else None
    return {"lines": len(steps), "step_ms": median_step(steps),
            "decode_only_step_ms": median_step([i for i in steps if not i.prefills]),
            "prefills_per_line": round(statistics.mean(i.prefills for i in steps), 2),
            "accept": statistics.median(i.accept for i in steps)}


def read_from(path: Path, offset: int) -> str:
    """What was appended to a log since it was ``offset`` bytes long."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description="Steady decode throughput of each concurrency level in "
                                "a whole server log (a level's lines: 90 to 100 % of C running).")
    p.add_argument("server_log", type=Path)
    p.add_argument("--concurrency", required=True, type=int_list,
                   help="comma-separated levels, e.g. 16,32,64,128")
    p.add_argument("--step-ms", type=float, metavar="MIN_ACCEPT",
                   help="instead, each level's decode step time, plain and drafting at an accept length "
                   "of at least MIN_ACCEPT (intervals without prefills): to set beside a cost table")
    args = p.parse_args(argv)
    text = args.server_log.read_text(errors="replace")
    if args.step_ms is not None:
        print(json.dumps({c: {"plain": step_ms(text, c), "drafting": step_ms(text, c, args.step_ms)}
                          for c in args.concurrency}, indent=1))
        return
    print(json.dumps({c: steady_throughput(text, c, at_most=c) for c in args.concurrency}, indent=1))


if __name__ == "__main__":
    main()
