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

Why: on one host the gated server's TTFT doubled, while neither its queue nor its prefill moved
(benchmark/results/2026-12-01-offcost-8b-2.2-c128-plain-decode). These stages say which of the
others holds the time.
"""

from __future__ import annotations

import json
import statistics
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Optional

STAGES = ("tokenize", "to_scheduler", "queue", "prefill", "back")
ONE_GREEDY_TOKEN = {"max_new_tokens": 1, "temperature": 0.0}


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


def prompt_texts(dataset: Path, count: int) -> list[str]:
    """The last ``count`` user turns of a prompts.py dataset. The client draws a level's prompts
    from the whole file, so a probe's may be cached already: that shortens its prefill alone."""
    with open(dataset) as f:
        rows = deque(f, maxlen=count)
    return [json.loads(row)["conversations"][0]["content"] for row in rows]


def post_generate(url: str, payload: dict, timeout: float = 120) -> dict:
    from sweep import http_json  # here: sweep imports this module

    return http_json(url + "/generate", payload, timeout)


class Probe:
    """While open, a thread sends one greedy one-token request every ``interval_s`` (after the
    last one returned) to ``url``, its prompts in turn, and keeps each one's stages. Each is one
    request beside the level's own, so a probe of every few seconds barely changes the load."""

    def __init__(self, url: str, prompts: list[str], interval_s: float,
                 post: Optional[Callable[[str, dict], dict]] = None) -> None:
        self.url, self.prompts, self.interval_s = url, prompts, interval_s
        self.post = post or post_generate
        self.splits: list[dict[str, float]] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, daemon=True)

    def __enter__(self) -> "Probe":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> Optional[dict[str, float]]:
        """The stages' medians, with the number of probes that failed or had no stamps where
        any did; None where no probe was sent."""
        if not (self.splits or self.errors):
            return None
        found = medians(self.splits) or {"probes": 0}
        return {**found, "errors": self.errors} if self.errors else found

    def _send(self) -> None:
        sent = 0
        while not self._stop.wait(self.interval_s):
            prompt = self.prompts[sent % len(self.prompts)]
            sent += 1
            try:
                result = self.post(self.url, {"text": prompt, "sampling_params": ONE_GREEDY_TOKEN})
            except (OSError, ValueError):  # refused, HTTP error, timeout, not JSON: counted
                self.errors += 1
                continue
            split = split_ms(result.get("meta_info", {}))
            if split is None:
                self.errors += 1
            else:
                self.splits.append(split)
