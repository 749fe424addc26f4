"""The soak's load: a closed loop whose concurrency follows a wave around the gate's threshold.

Every request goes to SGLang's native ``/generate`` with ``"stream": true`` and
``ignore_eos: true``, so a request that runs to its end must stream exactly ``max_new_tokens``
tokens and finish with ``finish_reason.type == "length"``; anything else is a truncated request.
SGLang streams ``data: {json}`` lines and a final ``data: [DONE]``
(``sglang/srt/entrypoints/http_server.py``, ``generate_request``); each chunk's ``output_ids``
holds every token so far, or only the new ones under ``--incremental-streaming-output``.

A planned share of requests is dropped by the client mid-stream (it closes the connection, as a
user who goes away does); SGLang then aborts them. Every request has a deadline: one that
exceeds it is counted as hung.

Prompts are random token ids: their length is exact without a tokenizer, any model accepts them,
and they almost never share a prefix, so the radix cache does not shorten the prefills.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterator, Optional

import aiohttp
import orjson  # an SGLang dependency; parses the cumulative chunks ~2x faster than json

# How often the loop re-reads the wave's target when no request finishes.
TICK_S = 0.1
# Lowest token id of a prompt: keeps clear of the special tokens at the bottom of most vocabularies.
FIRST_PROMPT_ID = 100
SAMPLING = {"temperature": 0.8, "top_p": 0.95}  # the "sampled" requests; the rest are greedy
# SGLang's cumulative chunks grow with the output; aiohttp's default 64 KiB read buffer is small
# for them under load (sglang.benchmark.serving raises it the same way).
READ_BUFSIZE = 10 * 1024**2
OUTCOMES = ("completed", "aborted", "lost", "truncated", "hung")
PROBE_TOKENS = 16


@dataclass(frozen=True)
class Wave:
    """Target concurrency over time: ``low`` to ``high`` and back once per ``period`` seconds.

    ``square`` holds ``low`` for the first half-period, then ``high``: abrupt switches.
    ``triangle`` ramps linearly, so the load lingers around the threshold and the dwell is
    exercised. Both start at ``low``.
    """

    low: int
    high: int
    period: float
    shape: str = "triangle"

    def target(self, t: float) -> int:
        phase = (t % self.period) / self.period
        if self.shape == "square":
            return self.low if phase < 0.5 else self.high
        rise = 1 - abs(2 * phase - 1)  # 0 -> 1 -> 0 over one period
        return round(self.low + (self.high - self.low) * rise)


@dataclass(frozen=True)
class RequestPlan:
    id: int
    rid: str  # SGLang's request id, so a request can be found in the server log
    prompt_ids: list[int]
    max_new_tokens: int
    sampled: bool
    abort_at: Optional[int]  # the client drops the stream once it has this many tokens

    def body(self) -> dict:
        sampling = {"max_new_tokens": self.max_new_tokens, "ignore_eos": True,
                    **(SAMPLING if self.sampled else {"temperature": 0.0})}
        return {"input_ids": self.prompt_ids, "sampling_params": sampling, "stream": True,
                "rid": self.rid}


@dataclass(frozen=True)
class Mix:
    """What requests look like: lengths drawn uniformly from the lists, shares of each kind."""

    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    abort_fraction: float
    sampled_fraction: float
    vocab_size: int

    def plans(self, seed: int, rid_prefix: str) -> Iterator[RequestPlan]:
        rng = random.Random(seed)
        i = 0
        while True:
            max_new = rng.choice(self.output_lens)
            abort = max_new > 1 and rng.random() < self.abort_fraction
            yield RequestPlan(
                # SGLang aborts every request whose rid *starts with* the aborted one's
                # (scheduler.py abort_request, for n > 1's suffixed rids): "x-1" would take
                # "x-10" down with it, so the rids are prefix-free.
                id=i, rid=f"{rid_prefix}-{i}.",
                prompt_ids=[rng.randrange(FIRST_PROMPT_ID, self.vocab_size)
                            for _ in range(rng.choice(self.prompt_lens))],
                max_new_tokens=max_new,
                sampled=rng.random() < self.sampled_fraction,
                abort_at=rng.randint(1, max_new - 1) if abort else None,
            )
            i += 1


@dataclass
class RequestResult:
    """One line of requests.jsonl."""

    id: int
    rid: str
    start_s: float  # since the soak started
    prompt_len: int
    max_new_tokens: int
    sampled: bool
    abort_at: Optional[int]
    aborted: bool = False  # the client did drop the stream (not if it finished first)
    tokens: int = 0  # output ids received
    completion_tokens: Optional[int] = None  # the server's count, from the last chunk
    finish_reason: Optional[dict] = None
    done: bool = False  # `data: [DONE]` arrived
    hung: bool = False
    error: Optional[str] = None
    ttft_s: Optional[float] = None
    latency_s: Optional[float] = None

    @classmethod
    def of(cls, plan: RequestPlan, start_s: float) -> "RequestResult":
        return cls(plan.id, plan.rid, start_s, len(plan.prompt_ids), plan.max_new_tokens,
                   plan.sampled, plan.abort_at)

    @property
    def outcome(self) -> str:
        """completed, aborted (by the client), lost (an error), truncated or hung."""
        if self.hung:
            return "hung"
        if self.error is not None:
            return "lost"
        if self.aborted:
            return "aborted"
        full = self.tokens == self.completion_tokens == self.max_new_tokens
        if full and (self.finish_reason or {}).get("type") == "length":
            return "completed"
        return "truncated"

    def row(self) -> dict:
        return {**asdict(self), "outcome": self.outcome}


@dataclass
class Load:
    """The loop's state, read by the sampler."""

    target: int = 0
    in_flight: int = 0
    failures: int = 0  # lost or hung requests so far
    stopped_early: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))


async def stream(session: aiohttp.ClientSession, url: str, plan: RequestPlan,
                 result: RequestResult, incremental: bool, started: float) -> None:
    """Send one request and read its stream into ``result``; errors land in ``result.error``."""
    async with session.post(url + "/generate", json=plan.body()) as resp:
        if resp.status != 200:
            result.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            return
        async for line in resp.content:
            if not line.startswith(b"data:"):
                continue  # the blank line after each event
            data = line[len(b"data:"):].strip()
            if data == b"[DONE]":
                result.done = True
                return
            chunk = orjson.loads(data)
            if "error" in chunk:
                result.error = f"server: {chunk['error']}"
                return
            ids = chunk.get("output_ids") or []
            result.tokens = result.tokens + len(ids) if incremental else len(ids)
            meta = chunk.get("meta_info") or {}
            result.completion_tokens = meta.get("completion_tokens")
            result.finish_reason = meta.get("finish_reason")
            if result.ttft_s is None and result.tokens:
                result.ttft_s = time.monotonic() - started
            if (plan.abort_at is not None and result.tokens >= plan.abort_at
                    and result.finish_reason is None):
                result.aborted = True
                resp.close()  # drop the connection, as a client that goes away does
                return
    result.error = "the stream ended without data: [DONE]"


async def run_request(session: aiohttp.ClientSession, url: str, plan: RequestPlan,
                      soak_start: float, timeout: float, incremental: bool) -> RequestResult:
    started = time.monotonic()
    result = RequestResult.of(plan, started - soak_start)
    try:
        await asyncio.wait_for(stream(session, url, plan, result, incremental, started), timeout)
    except asyncio.TimeoutError:  # before OSError: TimeoutError is one
        result.hung = True  # cancelling the stream closed the connection: SGLang aborts it
    except (aiohttp.ClientError, OSError, ValueError) as e:  # refused, reset, bad JSON
        result.error = f"{type(e).__name__}: {e}"
    result.latency_s = time.monotonic() - started
    return result


def client_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0)  # the wave, not the pool, bounds concurrency
    return aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE,
                                 timeout=aiohttp.ClientTimeout(total=None))


async def probe(session: aiohttp.ClientSession, url: str, rid_prefix: str, soak_start: float,
                timeout: float) -> RequestResult:
    """A short greedy request after the soak: does the server still serve in full?

    (``/health`` answers 200 without asking the scheduler anything.)
    """
    plan = RequestPlan(id=-1, rid=f"{rid_prefix}-probe", prompt_ids=[FIRST_PROMPT_ID] * 16,
                       max_new_tokens=PROBE_TOKENS, sampled=False, abort_at=None)
    return await run_request(session, url, plan, soak_start, timeout, incremental=False)


async def drive(session: aiohttp.ClientSession, url: str, wave: Wave, duration: float,
                plans: Iterator[RequestPlan], *, soak_start: float, timeout: float,
                incremental: bool, max_failures: int, load: Load,
                on_result: Callable[[RequestResult], None]) -> None:
    """Keep ``wave.target(t)`` requests in flight for ``duration`` seconds, then drain.

    A falling target launches nothing until enough requests have finished: the load drops as
    fast as requests end, as it does in production. After ``max_failures`` lost or hung
    requests the loop stops launching: the verdict is failed already, and a dead server would
    otherwise be sent requests as fast as they fail.
    """
    pending: set[asyncio.Task] = set()

    def collect(done: set[asyncio.Task]) -> None:
        for task in done:
            result = task.result()
            load.counts[result.outcome] += 1
            if result.outcome in ("lost", "hung"):
                load.failures += 1
            on_result(result)

    while (t := time.monotonic() - soak_start) < duration:
        if load.failures >= max_failures:
            load.stopped_early = True
            break
        load.target = wave.target(t)
        while len(pending) < load.target:
            pending.add(asyncio.create_task(run_request(
                session, url, next(plans), soak_start, timeout, incremental)))
        load.in_flight = len(pending)
        done, pending = await asyncio.wait(pending, timeout=TICK_S,
                                           return_when=asyncio.FIRST_COMPLETED)
        collect(done)
    load.target = 0
    if pending:  # each request ends by its deadline at the latest
        done, _ = await asyncio.wait(pending)
        collect(done)
    load.in_flight = 0
