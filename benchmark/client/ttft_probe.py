"""``--ttft-probe-interval S``: during a measured level, a greedy one-token request every S s, its
time to first token split across the server's processes (``analysis.ttft_split``). Each probe is
one request beside the level's own, so a probe of every few seconds barely changes the load."""

from __future__ import annotations

import json
import threading
from collections import deque
from pathlib import Path
from typing import Callable, Optional

from benchmark.analysis.ttft_split import medians, split_ms
from benchmark.servers.endpoints import http_json

ONE_GREEDY_TOKEN = {"max_new_tokens": 1, "temperature": 0.0}


def prompt_texts(dataset: Path, count: int) -> list[str]:
    """The last ``count`` user turns of a prompts.py dataset. The client draws a level's prompts
    from the whole file, so a probe's may be cached already: that shortens its prefill alone."""
    with open(dataset) as f:
        rows = deque(f, maxlen=count)
    return [json.loads(row)["conversations"][0]["content"] for row in rows]


def post_generate(url: str, payload: dict, timeout: float = 120) -> dict:
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
        self._thread = threading.Thread(target=self._send, name="ttft-probe", daemon=True)

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
