"""Where a request's time to first token goes across the server's processes, from probes sent
during a level.

With ``--enable-metrics``, a finished request's ``meta_info`` carries wall-clock stamps from
both sides (observability/req_time_stats.py):

* the tokenizer manager's ``request_received_ts``, ``api_server_dispatch_finish_ts`` (sent to
  the scheduler) and ``request_finished_ts`` (its last output handled);
* the scheduler's ``forward_entry_time``, ``prefill_finished_time`` and ``queue_time``.

A greedy request for one output token finishes with its prefill, so the stamps split its TTFT
into stages:

* ``tokenize``: received, until sent to the scheduler;
* ``to_scheduler``: sent, until in the scheduler's waiting queue (IPC, the scheduler's receive,
  the request's set-up);
* ``queue``: in the waiting queue (what ttft_stages.py's queue averages over all requests);
* ``prefill``: joining a batch, until the scheduler processed the prefill's result;
* ``back``: that result, until the tokenizer manager handled it (detokenizer, IPC, its loop).

Why: a gated server's TTFT can grow while neither its queue nor its prefill moves; these stages
say which of the others holds the time.
"""

from __future__ import annotations

import statistics
from typing import Optional

STAGES = ("tokenize", "to_scheduler", "queue", "prefill", "back")


def split_ms(meta: dict) -> Optional[dict[str, float]]:
    """A finished one-token request's stages in ms, or None where a stamp is missing (a server
    without --enable-metrics)."""
    try:
        received, sent = meta["request_received_ts"], meta["api_server_dispatch_finish_ts"]
        entered, queued = meta["forward_entry_time"], meta["queue_time"]
        prefilled, finished = meta["prefill_finished_time"], meta["request_finished_ts"]
    except KeyError:
        return None
    in_queue = entered - queued
    spans = (sent - received, in_queue - sent, queued, prefilled - entered, finished - prefilled)
    return {stage: round(1000 * span, 3) for stage, span in zip(STAGES, spans)}


def medians(splits: list[dict[str, float]]) -> Optional[dict[str, float]]:
    """The median of each stage over the probes, with their number; None without probes."""
    if not splits:
        return None
    return {"probes": len(splits),
            **{stage: round(statistics.median(s[stage] for s in splits), 3) for stage in STAGES}}
