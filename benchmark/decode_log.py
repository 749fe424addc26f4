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

import re
import statistics
from pathlib import Path
from typing import Optional

LINE = re.compile(r"Decode batch, #running-req: (\d+),.*?gen throughput \(token/s\): ([\d.]+)")
# A closed loop refills a finished request's slot after its prefill, so the batch sits a little
# under C while the level runs; 90 % of C keeps the steady state and drops the drain.
FULL_BATCH = 0.9


def steady_throughput(log_text: str, concurrency: int) -> Optional[dict]:
    """Median gen throughput of the decode lines with at least 90 % of ``concurrency`` running."""
    values = [float(tok_s) for running, tok_s in LINE.findall(log_text)
              if int(running) >= FULL_BATCH * concurrency]
    if not values:
        return None
    return {"lines": len(values), "median_tok_s": statistics.median(values)}


def read_from(path: Path, offset: int) -> str:
    """What was appended to a log since it was ``offset`` bytes long."""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")
