"""The soak's load: a closed loop whose concurrency follows a wave around the gate's threshold.

Every request goes to SGLang's native ``/generate`` with ``"stream": true`` and
``ignore_eos: true``, so a request that runs to its end must stream exactly ``max_new_tokens``
tokens and finish with ``finish_reason.type == "length"``; anything else is a truncated request.
SGLang streams ``data: {json}`` lines and a final ``data: [DONE]``
(``sglang/srt/entrypoints/http_server.py``, ``generate_request``); each chunk's ``output_ids``
holds every token so far, or only the new ones under ``--incremental-streaming-output``.

A planned share of requests is dropped by the client mid-stream, and another before its first
token, while it is queued or in prefill (the client closes the connection, as a user who goes
away does); SGLang then aborts them. Other shares ask for logprobs (one per output token, each
naming that token) or carry stop strings (a request then ends at the first one, which its text
must not contain); a broken contract is a "malformed" request. Prompts long enough to take
several prefill chunks are launched only while the load is above the gate's threshold, so they
are prefilled while the gate is off, and bursts lift the load above the server's
``--max-running-requests`` so that requests queue and, with a small KV pool, are retracted.
Every request has a deadline: one that exceeds it is counted as hung.

Prompts are random token ids: their length is exact without a tokenizer, any model accepts them,
and they almost never share a prefix, so the radix cache does not shorten the prefills.

Every time is read from the running event loop's clock (``loop_time``, time.monotonic on
asyncio's loops), so that the load runs as it would on a loop whose clock is a test's.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional

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
OUTCOMES = ("completed", "aborted", "lost", "truncated", "malformed", "hung")
# What the load is made to exercise, counted by Load.exercised (the verdict's "exercised" rows).
EXERCISED = ("logprobs", "stopped by a string", "long prompts above N", "dropped before a token")
PROBE_TOKENS = 16


@dataclass(frozen=True)
class Wave:
    """Target concurrency over time: ``low`` to ``high`` and back once per ``period`` seconds.

    ``square`` holds ``low`` for the first half-period, then ``high``: abrupt switches.
    ``triangle`` ramps linearly, so the load lingers around the threshold and the dwell is
    exercised. Both start at ``low``. A burst adds ``burst`` requests for the last
    ``burst_s`` seconds of every ``burst_every``.
    """

    low: int
    high: int
    period: float
    shape: str = "triangle"
    burst: int = 0
    burst_every: float = 0.0
    burst_s: float = 0.0

    def target(self, t: float) -> int:
        bursting = self.burst and t % self.burst_every >= self.burst_every - self.burst_s
        return self._base(t) + (self.burst if bursting else 0)

    def _base(self, t: float) -> int:
        phase = (t % self.period) / self.period
        if self.shape == "square":
            return self.low if phase < 0.5 else self.high
        rise = 1 - abs(2 * phase - 1)  # 0 -> 1 -> 0 over one period
        return round(self.low + (self.high - self.low) * rise)


def common_substring(texts: list[str], length: int) -> Optional[str]:
    """The ``length`` characters found in most of ``texts`` (at least half of them; the first
    in sorted order among equals), for a stop string that outputs do reach."""
    found: dict[str, int] = {}
    for text in texts:
        for window in {text[i:i + length] for i in range(len(text) - length + 1)}:
            if window.isprintable() and not window.isspace():
                found[window] = found.get(window, 0) + 1
    best = min(found, key=lambda w: (-found[w], w), default=None)
    return best if best is not None and 2 * found[best] >= len(texts) else None


@dataclass(frozen=True)
class RequestPlan:
    id: int
    rid: str  # SGLang's request id, so a request can be found in the server log
    prompt_ids: list[int]
    max_new_tokens: int
    sampled: bool
    # The client drops the stream once it has this many tokens; 0: on the response's headers,
    # before the first token (the request is then queued or in prefill).
    abort_at: Optional[int]
    logprobs: bool = False
    stop: tuple[str, ...] = ()
    long_prompt: bool = False  # launched above the threshold, to be prefilled in chunks

    def body(self) -> dict:
        sampling = {"max_new_tokens": self.max_new_tokens, "ignore_eos": True,
                    **(SAMPLING if self.sampled else {"temperature": 0.0})}
        if self.stop:
            sampling["stop"] = list(self.stop)
        body = {"input_ids": self.prompt_ids, "sampling_params": sampling, "stream": True,
                "rid": self.rid}
        if self.logprobs:
            body["return_logprob"] = True
        return body


@dataclass(frozen=True)
class Mix:
    """What requests look like: lengths drawn uniformly from the lists, shares of each kind.

    ``long_prompt_fraction`` is the share of long prompts among the requests launched while
    more than ``long_prompt_above`` are wanted in flight."""

    prompt_lens: tuple[int, ...]
    output_lens: tuple[int, ...]
    abort_fraction: float
    sampled_fraction: float
    vocab_size: int
    prefill_abort_fraction: float = 0.0
    logprob_fraction: float = 0.0
    stop_fraction: float = 0.0
    stop_strings: tuple[str, ...] = ()
    long_prompt_len: int = 0
    long_prompt_fraction: float = 0.0
    long_prompt_above: int = 0

    def plans(self, seed: int, rid_prefix: str) -> "Planner":
        return Planner(self, random.Random(seed), rid_prefix)


class Planner:
    """The mix's requests, one at a time; ``next(target)`` is told the load it is launched into."""

    def __init__(self, mix: Mix, rng: random.Random, rid_prefix: str) -> None:
        self.mix, self.rng, self.rid_prefix, self.count = mix, rng, rid_prefix, 0

    def next(self, target: int) -> RequestPlan:
        mix, rng, i = self.mix, self.rng, self.count
        self.count += 1
        max_new = rng.choice(mix.output_lens)
        prompt_len = rng.choice(mix.prompt_lens)
        long_prompt = target > mix.long_prompt_above and rng.random() < mix.long_prompt_fraction
        drop = rng.random()
        if max_new > 1 and drop < mix.abort_fraction:
            abort_at = rng.randint(1, max_new - 1)
        elif drop >= 1 - mix.prefill_abort_fraction:
            abort_at = 0
        else:
            abort_at = None
        return RequestPlan(
            # SGLang aborts every request whose rid *starts with* the aborted one's
            # (scheduler.py abort_request, for n > 1's suffixed rids): "x-1" would take
            # "x-10" down with it, so the rids are prefix-free.
            id=i, rid=f"{self.rid_prefix}-{i}.",
            prompt_ids=[rng.randrange(FIRST_PROMPT_ID, mix.vocab_size)
                        for _ in range(mix.long_prompt_len if long_prompt else prompt_len)],
            max_new_tokens=max_new,
            sampled=rng.random() < mix.sampled_fraction,
            abort_at=abort_at,
            logprobs=rng.random() < mix.logprob_fraction,
            stop=mix.stop_strings if rng.random() < mix.stop_fraction else (),
            long_prompt=long_prompt,
        )


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
    logprobs: bool = False
    stop: tuple[str, ...] = ()
    long_prompt: bool = False
    aborted: bool = False  # the client did drop the stream (not if it finished first)
    tokens: int = 0  # output ids received
    completion_tokens: Optional[int] = None  # the server's count, from the last chunk
    finish_reason: Optional[dict] = None
    done: bool = False  # `data: [DONE]` arrived
    hung: bool = False
    error: Optional[str] = None
    broken: Optional[str] = None  # the logprob or stop-string contract it broke
    ttft_s: Optional[float] = None
    latency_s: Optional[float] = None

    @classmethod
    def of(cls, plan: RequestPlan, start_s: float) -> "RequestResult":
        return cls(plan.id, plan.rid, start_s, len(plan.prompt_ids), plan.max_new_tokens,
                   plan.sampled, plan.abort_at, plan.logprobs, plan.stop, plan.long_prompt)

    @property
    def stopped_by_string(self) -> bool:
        reason = self.finish_reason or {}
        return reason.get("type") == "stop" and reason.get("matched") in self.stop

    @property
    def outcome(self) -> str:
        """completed, aborted (by the client), lost (an error), truncated, malformed or hung."""
        if self.hung:
            return "hung"
        if self.error is not None:
            return "lost"
        if self.aborted:
            return "aborted"
        if self.broken is not None:
            return "malformed"
        counted = self.tokens == self.completion_tokens
        ran_out = (self.finish_reason or {}).get("type") == "length" \
            and self.tokens == self.max_new_tokens
        if counted and (ran_out or (self.stopped_by_string and self.tokens <= self.max_new_tokens)):
            return "completed"
        return "truncated"

    def exercised(self) -> list[str]:
        """What of EXERCISED this request did."""
        done = self.outcome == "completed"
        return [what for what, did in (
            ("logprobs", done and self.logprobs),
            ("stopped by a string", done and self.stopped_by_string),
            ("long prompts above N", done and self.long_prompt),
            ("dropped before a token", self.outcome == "aborted" and self.tokens == 0),
        ) if did]

    def row(self) -> dict:
        return {**asdict(self), "outcome": self.outcome}


class Output:
    """A stream's output so far, from cumulative or incremental chunks: the ids, the text and
    the logprobs, kept only where a contract is checked."""

    def __init__(self, plan: RequestPlan, incremental: bool) -> None:
        self.plan, self.incremental = plan, incremental
        self.ids: list[int] = []
        self.text = ""
        self.text_before_last = ""  # the text before the latest chunk
        self.logprobs: list = []

    def add(self, chunk: dict) -> None:
        ids, meta = chunk.get("output_ids") or [], chunk.get("meta_info") or {}
        logprobs = meta.get("output_token_logprobs") or []
        self.text_before_last = self.text
        if self.incremental:
            self.ids += ids
            self.text += chunk.get("text", "")
            self.logprobs += logprobs
        else:
            self.ids, self.text, self.logprobs = ids, chunk.get("text", ""), logprobs

    def broken(self, finish_reason: Optional[dict]) -> Optional[str]:
        """How a finished stream broke its contract: a logprob per output token, each naming
        that token (entries are [logprob, token id, text]); no stop string in the text, but in
        the last chunk of a request that ended by length: SGLang checks the length limit before
        stop strings (schedule_batch.py, Req.update_finish_state), so a last step that
        completes a stop string ends the request by length with the string kept."""
        if self.plan.logprobs:
            if len(self.logprobs) != len(self.ids):
                return f"{len(self.logprobs)} logprobs for {len(self.ids)} tokens"
            if [entry[1] for entry in self.logprobs] != self.ids:
                return "the logprobs name other tokens than the output's"
        by_length = (finish_reason or {}).get("type") == "length"
        checked = self.text_before_last if by_length else self.text
        found = [stop for stop in self.plan.stop if stop in checked]
        return f"stop string {found[0]!r} in the output" if found else None


@dataclass
class Load:
    """The loop's state, read by the sampler."""

    target: int = 0
    in_flight: int = 0
    failures: int = 0  # lost or hung requests so far
    stopped_early: bool = False
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    exercised: dict[str, int] = field(default_factory=lambda: dict.fromkeys(EXERCISED, 0))


def loop_time() -> float:
    """The running event loop's clock, which the load's times and timeouts share."""
    return asyncio.get_running_loop().time()


async def stream(session: aiohttp.ClientSession, url: str, plan: RequestPlan,
                 result: RequestResult, incremental: bool, started: float) -> None:
    """Send one request and read its stream into ``result``; errors land in ``result.error``."""
    output = Output(plan, incremental)
    async with session.post(url + "/generate", json=plan.body()) as resp:
        if resp.status != 200:
            result.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            return
        if plan.abort_at == 0:
            result.aborted = True
            resp.close()  # before its first token: SGLang still holds it queued or in prefill
            return
        async for line in resp.content:
            if not line.startswith(b"data:"):
                continue  # the blank line after each event
            data = line[len(b"data:"):].strip()
            if data == b"[DONE]":
                result.done = True
                result.broken = output.broken(result.finish_reason)
                return
            chunk = orjson.loads(data)
            if "error" in chunk:
                result.error = f"server: {chunk['error']}"
                return
            output.add(chunk)
            result.tokens = len(output.ids)
            meta = chunk.get("meta_info") or {}
            result.completion_tokens = meta.get("completion_tokens")
            result.finish_reason = meta.get("finish_reason")
            if result.ttft_s is None and result.tokens:
                result.ttft_s = loop_time() - started
            if (plan.abort_at is not None and result.tokens >= plan.abort_at
                    and result.finish_reason is None):
                result.aborted = True
                resp.close()  # drop the connection, as a client that goes away does
                return
    result.error = "the stream ended without data: [DONE]"


async def run_request(session: aiohttp.ClientSession, url: str, plan: RequestPlan,
                      soak_start: float, timeout: float, incremental: bool) -> RequestResult:
    started = loop_time()
    result = RequestResult.of(plan, started - soak_start)
    try:
        await asyncio.wait_for(stream(session, url, plan, result, incremental, started), timeout)
    except asyncio.TimeoutError:  # before OSError: TimeoutError is one
        result.hung = True  # cancelling the stream closed the connection: SGLang aborts it
    except (aiohttp.ClientError, OSError, ValueError) as e:  # refused, reset, bad JSON
        result.error = f"{type(e).__name__}: {e}"
    result.latency_s = loop_time() - started
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
                plans: Planner, *, soak_start: float, timeout: float,
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
            for what in result.exercised():
                load.exercised[what] += 1
            if result.outcome in ("lost", "hung"):
                load.failures += 1
            on_result(result)

    while (t := loop_time() - soak_start) < duration:
        if load.failures >= max_failures:
            load.stopped_early = True
            break
        load.target = wave.target(t)
        while len(pending) < load.target:
            pending.add(asyncio.create_task(run_request(
                session, url, plans.next(load.target), soak_start, timeout, incremental)))
        load.in_flight = len(pending)
        done, pending = await asyncio.wait(pending, timeout=TICK_S,
                                           return_when=asyncio.FIRST_COMPLETED)
        collect(done)
    load.target = 0
    if pending:  # each request ends by its deadline at the latest
        done, _ = await asyncio.wait(pending)
        collect(done)
    load.in_flight = 0
