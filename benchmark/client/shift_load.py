"""The shift scenario's load: a closed loop whose prompts change the draft's domain every phase
while its concurrency steps through a list, on the same schedule for every server.

The model pair is made with one accept length per domain (``model_pair.py --accept-length
3.2,1.3``): a request stays in the domain of its prompt's last token. Every request is greedy
with ``ignore_eos``, so its output is known in advance, the walk onward from that token
(design.json), and a server whose output differs from it differs from a plain server's.

Every time is read from the running event loop's clock, so the load runs as it would on a loop
whose clock is a test's.
"""

from __future__ import annotations

import asyncio
import math
import random
from dataclasses import dataclass, field
from typing import Awaitable, Callable

# Lowest token id of a prompt's random part: clear of the special tokens at the bottom.
FIRST_PROMPT_ID = 100

Post = Callable[[dict], Awaitable[dict]]


@dataclass(frozen=True)
class ShiftSchedule:
    """Domain ``t // phase_s mod domains`` and concurrency ``concurrency[t // concurrency_s mod
    len]`` at time t, for ``phases`` phases."""

    domains: int
    phases: int = 6
    phase_s: float = 60.0
    concurrency: tuple[int, ...] = (4, 64, 16, 32)
    concurrency_s: float = 20.0

    def __post_init__(self) -> None:
        if self.domains < 1 or self.phases < 1 or self.phase_s <= 0 or self.concurrency_s <= 0:
            raise ValueError(f"a schedule needs domains, phases and periods above 0: {self}")
        if not self.concurrency or min(self.concurrency) < 1:
            raise ValueError(f"concurrency levels must be >= 1, got {list(self.concurrency)}")

    @property
    def duration_s(self) -> float:
        return self.phases * self.phase_s

    def phase_at(self, t: float) -> int:
        return int(t // self.phase_s)

    def domain_at(self, t: float) -> int:
        return self.phase_at(t) % self.domains

    def concurrency_at(self, t: float) -> int:
        return self.concurrency[int(t // self.concurrency_s) % len(self.concurrency)]

    def next_change(self, t: float) -> float:
        """The next time the domain or the concurrency changes, or the schedule ends."""
        return min((math.floor(t / p) + 1) * p for p in (self.phase_s, self.concurrency_s, self.duration_s))

    def segment_seconds(self) -> dict[tuple[int, int], float]:
        """The seconds the schedule spends in each (domain, concurrency) segment."""
        seconds: dict[tuple[int, int], float] = {}
        t = 0.0
        while t < self.duration_s:
            end = self.next_change(t)
            key = (self.domain_at(t), self.concurrency_at(t))
            seconds[key] = seconds.get(key, 0.0) + end - t
            t = end
        return seconds


class Walk:
    """The pair's language from its design.json: each domain's tokens and the walk's next token."""

    def __init__(self, design: dict) -> None:
        order, sizes = design["walk"], [d["size"] for d in design["domains"]] or [len(design["walk"])]
        self.domain_tokens: list[list[int]] = []
        self.next_token: dict[int, int] = {}
        start = 0
        for size in sizes:  # design.json lists each domain's cycle in turn
            cycle = order[start:start + size]
            start += size
            self.domain_tokens.append(cycle)
            self.next_token.update(zip(cycle, cycle[1:] + cycle[:1]))

    @property
    def domains(self) -> int:
        return len(self.domain_tokens)

    def continuation(self, last_token: int, length: int) -> list[int]:
        out, token = [], last_token
        for _ in range(length):
            token = self.next_token[token]
            out.append(token)
        return out


@dataclass
class RequestRecord:
    start: float
    end: float
    phase: int
    domain: int
    concurrency: int
    output_tokens: int
    matched: bool
    error: str = ""


@dataclass
class LoadResult:
    segment_seconds: dict[tuple[int, int], float]  # the schedule's (ShiftSchedule.segment_seconds)
    requests: list[RequestRecord] = field(default_factory=list)
    end: float = 0.0  # when the last request finished, from the load's start

    def summary(self) -> dict:
        done = [r for r in self.requests if not r.error]
        tokens = sum(r.output_tokens for r in done)
        by_phase: dict[int, dict] = {}
        for r in done:
            phase = by_phase.setdefault(r.phase, {"domain": r.domain, "requests": 0, "output_tokens": 0})
            phase["requests"] += 1
            phase["output_tokens"] += r.output_tokens
        # A request's tokens count in the segment it started in, as in its phase.
        by_segment = {key: {"domain": key[0], "concurrency": key[1], "seconds": seconds,
                            "requests": 0, "output_tokens": 0}
                      for key, seconds in sorted(self.segment_seconds.items())}
        for r in done:
            segment = by_segment[(r.domain, r.concurrency)]
            segment["requests"] += 1
            segment["output_tokens"] += r.output_tokens
        return {
            "output_throughput": tokens / self.end if self.end else 0.0,
            "output_tokens": tokens, "requests": len(self.requests), "duration_s": self.end,
            "errors": sum(1 for r in self.requests if r.error),
            "mismatched": sum(1 for r in done if not r.matched),
            "first_errors": [r.error for r in self.requests if r.error][:5],
            "by_phase": [by_phase[k] for k in sorted(by_phase)],
            "by_segment": list(by_segment.values()),
        }


async def run_load(post: Post, schedule: ShiftSchedule, walk: Walk, *, output_len: int,
                   prompt_len: int, seed: int = 0) -> LoadResult:
    """Run the schedule against ``post`` (one /generate request, its JSON reply): as many
    workers as the largest concurrency, each sending requests back to back while its index is
    below the concurrency of the moment. Requests still running at the schedule's end finish."""
    if walk.domains != schedule.domains:
        raise ValueError(f"the pair has {walk.domains} domains, the schedule {schedule.domains}")
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = LoadResult(segment_seconds=schedule.segment_seconds())

    def now() -> float:
        return loop.time() - started

    async def worker(index: int) -> None:
        rng = random.Random(f"{seed}-{index}")  # every server gets the same prompts in the same order
        while (t := now()) < schedule.duration_s:
            concurrency = schedule.concurrency_at(t)
            if index >= concurrency:
                await asyncio.sleep(schedule.next_change(t) - t)
                continue
            domain = schedule.domain_at(t)
            last = rng.choice(walk.domain_tokens[domain])
            prompt = [rng.randrange(FIRST_PROMPT_ID, 32000) for _ in range(prompt_len - 1)] + [last]
            record = RequestRecord(t, t, schedule.phase_at(t), domain, concurrency, 0, False)
            try:
                reply = await post({"input_ids": prompt, "sampling_params": {
                    "max_new_tokens": output_len, "temperature": 0.0, "ignore_eos": True}})
                output = reply["output_ids"]
                record.output_tokens = len(output)
                record.matched = output == walk.continuation(last, output_len)
            except Exception as e:  # the server's failure is a result of the run, not of the load
                record.error = f"{type(e).__name__}: {e}"
            record.end = now()
            result.requests.append(record)
            result.end = max(result.end, record.end)

    await asyncio.gather(*(worker(i) for i in range(max(schedule.concurrency))))
    return result
