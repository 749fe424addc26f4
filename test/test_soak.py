"""CPU tests of the soak benchmark against a fake server that streams like SGLang's /generate.

The fake answers ``/generate`` with ``data: {json}`` events (cumulative ``text``, ``output_ids``
and ``meta_info.completion_tokens``/``finish_reason``/``output_token_logprobs``, or deltas when
``incremental``) and a final ``data: [DONE]``, as ``sglang/srt/entrypoints/http_server.py`` does,
ending a request at its first stop string with the string trimmed from the text, as SGLang's
detokenizer does; a request without ``stream`` gets one JSON answer per prompt. ``/server_info``
has a ``spec_gate`` dict. Its ``behaviour`` picks how a request goes wrong.

Tests of a real connection (parsing, client drops the server sees) reach the fake over HTTP;
tests of times (the wave the load follows, timeouts, the samples of a whole soak) reach it
in-process on a virtual clock (virtual_time.py), where they are exact and take no wall-clock time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence

import pytest
import virtual_time
from threaded_server import serving

from benchmark.analysis import soak_verdict
from benchmark.client import soak, soak_load
from benchmark.client.soak_load import Load, Mix, RequestPlan, RequestResult, Wave
from benchmark.servers import memory

# Between two events of a stream in the virtual session; a stall lasts longer than any test waits.
TOKEN_DELAY_S = 0.002
STALL_S = 3600.0
STALL = None  # what events() yields where the server stops sending without ending the stream


class FakeSGLang(ThreadingHTTPServer):
    """SGLang's HTTP server as the soak sees it, and ``session()``: the same server reached
    in-process, on the event loop's clock, for the tests whose times must be exact."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        # Per request body -> ok | short | error | http500 | drop | stall | endless | no_logprob
        # | no_trim | length_first | ignore_stop
        self.behaviour: Callable[[dict], str] = lambda body: "ok"
        self.incremental = False
        self.gate: Optional[dict] = {"active": True, "threshold": 4, "reenable_threshold": 4,
                                     "dwell_steps": 8, "last_decode_batch_size": 0,
                                     "fast_off_path": True}
        self.lock = threading.Condition()
        self.served = 0
        self.disconnected: set[str] = set()
        self.released = threading.Event()  # ends the HTTP server's stalls, at the test's end

    def gate_state(self) -> Optional[dict]:
        if self.gate is None:
            return None
        with self.lock:  # counters that move with the load, like the real gate's
            return {**self.gate, "decode_steps_spec": 10 * self.served,
                    "decode_steps_plain": 5 * self.served, "switches": self.served}

    def ended(self, rid: str, disconnected: bool) -> None:
        with self.lock:
            self.served += 1
            if disconnected:
                self.disconnected.add(rid)
            self.lock.notify_all()

    def wait_disconnected(self, rid: str) -> bool:
        """Whether the server saw the client drop ``rid`` (a bound, not a pace: it writes until
        the socket fails)."""
        with self.lock:
            return self.lock.wait_for(lambda: rid in self.disconnected, timeout=60)

    def session(self) -> "FakeSession":
        return FakeSession(self)


def events(fake: FakeSGLang, body: dict, behaviour: str) -> Iterator[Optional[bytes]]:
    """The ``data:`` events of one streamed /generate, as SGLang sends them, and STALL where the
    server stops sending; the stream ends early without ``[DONE]`` for "drop"."""
    sampling, incremental = body["sampling_params"], fake.incremental
    n = sampling["max_new_tokens"]
    last = n - 1 if behaviour == "short" else n
    ids: list[int] = []
    sent = ""  # the text streamed so far
    for i in itertools.count() if behaviour == "endless" else range(last):
        if behaviour == "stall" and i == 2:
            yield STALL
        if behaviour == "drop" and i == 2:
            return
        ids.append(TOKEN_IDS[i % len(TOKEN_IDS)])
        text = text_of(len(ids))
        stop = next((s for s in sampling.get("stop", []) if s in text), None)
        # SGLang's order: the length limit before stop strings; or a server that ignores them.
        if behaviour == "ignore_stop" or (behaviour == "length_first" and i == last - 1):
            stop = None
        if stop is not None and behaviour != "no_trim":
            text = text[:text.index(stop)]
        finish = {"type": "stop", "matched": stop} if stop is not None else \
            {"type": "length", "length": n} if i == last - 1 and behaviour != "endless" else None
        meta = {"id": body["rid"], "completion_tokens": len(ids), "finish_reason": finish}
        if body.get("return_logprob"):
            logprobs = [[-0.5, t, None] for t in ids]
            if behaviour == "no_logprob" and finish:
                logprobs.pop()
            meta["output_token_logprobs"] = logprobs[len(ids) - 1:] if incremental else logprobs
        yield event({"text": text[len(sent):] if incremental else text,
                     "output_ids": ids[-1:] if incremental else ids, "meta_info": meta})
        sent = text
        if finish:
            break
    if behaviour == "error":
        yield event({"error": {"message": "bad request", "code": 400}})
    yield b"data: [DONE]\n\n"


def event(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class Handler(BaseHTTPRequestHandler):
    server: FakeSGLang

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/server_info":
            self.reply(200, json.dumps({"incremental_streaming_output": self.server.incremental,
                                        "internal_states": [{
                                            "spec_gate": self.server.gate_state(),
                                            "attention_backend": "fake",
                                            "effective_max_running_requests_per_dp": 8}]}))
        else:  # /health
            self.reply(200, "")

    def reply(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        fake = self.server
        behaviour = fake.behaviour(body)
        if not body.get("stream"):  # a batch of greedy prompts, as the stop-string calibration sends
            n = body["sampling_params"]["max_new_tokens"]
            self.reply(200, json.dumps([{"text": text_of(n)} for _ in body["input_ids"]]))
            return
        if behaviour == "http500":
            self.reply(500, "boom")
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        try:
            for data in events(fake, body, behaviour):
                if data is STALL:
                    fake.released.wait()
                    continue
                self.wfile.write(data)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            fake.ended(body["rid"], disconnected=True)
        else:
            fake.ended(body["rid"], disconnected=False)


class FakeSession:
    """What the soak asks of an aiohttp.ClientSession (``post`` and its response's status, text,
    lines and close), answered in-process from ``events``: TOKEN_DELAY_S apart on the running
    loop's clock, STALL_S for a stall, an HTTP error after one TOKEN_DELAY_S."""

    def __init__(self, fake: FakeSGLang) -> None:
        self.fake = fake

    async def __aenter__(self) -> "FakeSession":
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    @contextlib.asynccontextmanager
    async def post(self, url: str, json: dict):
        behaviour = self.fake.behaviour(json)
        response = FakeResponse(self.fake, json, behaviour)
        await asyncio.sleep(TOKEN_DELAY_S)  # the request's trip: time moves even when it fails
        try:
            yield response
        finally:  # the client closed it, timed out or failed before the stream's end
            if not response.finished:
                self.fake.ended(json["rid"], disconnected=True)


class FakeResponse:
    def __init__(self, fake: FakeSGLang, body: dict, behaviour: str) -> None:
        self.fake, self.body, self.behaviour = fake, body, behaviour
        self.status = 500 if behaviour == "http500" else 200
        self.finished = self.status != 200

    async def text(self) -> str:
        return "boom"

    def close(self) -> None:
        pass  # the client is gone; post() sees the stream unfinished

    @property
    async def content(self):  # aiohttp's StreamReader yields the body line by line
        for data in events(self.fake, self.body, self.behaviour):
            await asyncio.sleep(STALL_S if data is STALL else TOKEN_DELAY_S)
            if data is not STALL:
                for line in data.splitlines(keepends=True):
                    yield line
        self.finished = True
        self.fake.ended(self.body["rid"], disconnected=False)


# The fake's output: token i is TOKEN_IDS[i % 26] and reads as the i-th letter of the alphabet.
TOKEN_IDS = list(range(200, 226))


def text_of(tokens: int) -> str:
    return "".join(chr(ord("a") + i % 26) for i in range(tokens))


@pytest.fixture()
def fake() -> Iterator[FakeSGLang]:
    server = FakeSGLang()
    with serving(server):
        yield server
        server.released.set()  # stalled handlers end, so the server can stop


def plan(max_new: int = 12, abort_at: Optional[int] = None, rid: str = "r", **kinds) -> RequestPlan:
    return RequestPlan(id=0, rid=rid, prompt_ids=[101, 102, 103], max_new_tokens=max_new,
                       sampled=False, abort_at=abort_at, **kinds)


async def request(session, url: str, p: RequestPlan, timeout: float, incremental: bool) -> RequestResult:
    return await soak_load.run_request(session, url, p, soak_load.loop_time(), timeout, incremental)


def send(fake: FakeSGLang, p: RequestPlan, timeout: float = 5.0, incremental: bool = False) -> RequestResult:
    """One request to the fake over HTTP, on asyncio's own loop."""
    async def go() -> RequestResult:
        async with soak_load.client_session() as session:
            return await request(session, fake.url, p, timeout, incremental)
    return asyncio.run(go())


def send_in_virtual_time(fake: FakeSGLang, p: RequestPlan, timeout: float = 5.0) -> RequestResult:
    """One request to the fake in-process, on the virtual clock: its times are exact."""
    return virtual_time.run(request(fake.session(), fake.url, p, timeout, incremental=False))


# --------------------------------------------------------------------------- load


def test_wave_shapes() -> None:
    square = Wave(2, 8, period=10, shape="square")
    assert [square.target(t) for t in (0, 4.9, 5, 9.9, 10, 15)] == [2, 2, 8, 8, 2, 8]
    triangle = Wave(2, 8, period=10)
    assert [triangle.target(t) for t in (0, 2.5, 5, 7.5, 10)] == [2, 5, 8, 5, 2]
    assert all(2 <= triangle.target(t / 10) <= 8 for t in range(300))


def test_bursts_lift_the_wave_for_their_last_seconds() -> None:
    wave = Wave(2, 8, period=10, shape="square", burst=16, burst_every=20, burst_s=8)
    assert [wave.target(t) for t in (0, 11.9, 12, 16, 20, 32)] == [2, 2, 18, 24, 2, 18]


def draw(mix: Mix, targets: Sequence[int], seed: int = 1) -> list[RequestPlan]:
    planner = mix.plans(seed=seed, rid_prefix="s")
    return [planner.next(target) for target in targets]


def test_plans_are_mixed_and_reproducible() -> None:
    mix = Mix(prompt_lens=(4, 64), output_lens=(8, 32), abort_fraction=0.3,
              sampled_fraction=0.5, vocab_size=1000, prefill_abort_fraction=0.1,
              logprob_fraction=0.2, stop_fraction=0.25, stop_strings=("ab",),
              long_prompt_len=500, long_prompt_fraction=0.5, long_prompt_above=4)
    targets = [2, 6] * 200  # below and above long_prompt_above in turn
    plans = draw(mix, targets)
    assert plans == draw(mix, targets)
    assert {len(p.prompt_ids) for p in plans} == {4, 64, 500}
    assert {p.max_new_tokens for p in plans} == {8, 32}
    assert all(100 <= i < 1000 for p in plans for i in p.prompt_ids)
    aborted = [p for p in plans if p.abort_at]
    assert 0.2 < len(aborted) / len(plans) < 0.4
    assert all(1 <= p.abort_at < p.max_new_tokens for p in aborted)
    assert 0.05 < sum(p.abort_at == 0 for p in plans) / len(plans) < 0.15
    assert 0.4 < sum(p.sampled for p in plans) / len(plans) < 0.6
    assert 0.1 < sum(p.logprobs for p in plans) / len(plans) < 0.3
    assert {p.stop for p in plans} == {(), ("ab",)}
    assert 0.15 < sum(bool(p.stop) for p in plans) / len(plans) < 0.35
    # Long prompts only where the load they join is above the threshold, at their share there.
    long = [p.long_prompt for p, target in zip(plans, targets) if target > 4]
    assert not any(p.long_prompt for p, target in zip(plans, targets) if target <= 4)
    assert 0.4 < sum(long) / len(long) < 0.6
    assert all(len(p.prompt_ids) == 500 for p in plans if p.long_prompt)
    rids = sorted(p.rid for p in plans) + ["s-probe"]  # probe()'s rid
    # A client abort must not abort another request: SGLang matches rids by prefix.
    assert not any(b.startswith(a) for a, b in zip(rids, rids[1:]))
    body = plans[0].body()
    assert body["stream"] and body["sampling_params"]["ignore_eos"]
    assert body["sampling_params"]["max_new_tokens"] == plans[0].max_new_tokens
    asks = next(p for p in plans if p.logprobs and p.stop).body()
    assert asks["return_logprob"] is True and asks["sampling_params"]["stop"] == ["ab"]
    plain = next(p for p in plans if not p.logprobs and not p.stop).body()
    assert "return_logprob" not in plain and "stop" not in plain["sampling_params"]


def test_common_substring_is_found_in_most_texts() -> None:
    assert soak_load.common_substring(["xaby", "zabq", "qqqq", "abab"], 2) == "ab"
    assert soak_load.common_substring(["xyz", "zyx", "abc"], 2) is None  # in fewer than half
    assert soak_load.common_substring(["  a", "  b", "  c"], 2) is None  # whitespace is no stop string
    assert soak_load.common_substring(["bbaa", "aabb"], 2) == "aa"  # the first among equals


@pytest.mark.parametrize("incremental", [False, True])
def test_a_full_stream_completes(fake: FakeSGLang, incremental: bool) -> None:
    fake.incremental = incremental
    result = send(fake, plan(12), incremental=incremental)
    assert result.outcome == "completed"
    assert (result.tokens, result.completion_tokens, result.done) == (12, 12, True)
    assert result.finish_reason == {"type": "length", "length": 12}
    assert result.ttft_s <= result.latency_s


def test_a_streams_times_are_its_first_token_and_its_end(fake: FakeSGLang) -> None:
    # In-process, on the virtual clock: the request's trip, then 12 tokens and [DONE], each an event.
    result = send_in_virtual_time(fake, plan(12))
    assert result.outcome == "completed"
    assert (result.ttft_s, result.latency_s) == (pytest.approx(2 * TOKEN_DELAY_S), pytest.approx(14 * TOKEN_DELAY_S))


@pytest.mark.parametrize("incremental", [False, True])
def test_logprobs_and_stop_strings_are_checked(fake: FakeSGLang, incremental: bool) -> None:
    fake.incremental = incremental
    asked = send(fake, plan(12, logprobs=True), incremental=incremental)
    assert asked.outcome == "completed" and asked.exercised() == ["logprobs"]
    stopped = send(fake, plan(12, stop=("ef", "zz")), incremental=incremental)
    assert stopped.finish_reason == {"type": "stop", "matched": "ef"}
    assert (stopped.outcome, stopped.tokens, stopped.exercised()) == \
        ("completed", 6, ["stopped by a string"])
    unmatched = send(fake, plan(4, stop=("zz",)), incremental=incremental)
    assert unmatched.outcome == "completed" and unmatched.exercised() == []
    fake.behaviour = lambda body: "length_first"  # "kl" completes on the 12th, the last, token
    kept = send(fake, plan(12, stop=("kl",)), incremental=incremental)
    assert (kept.outcome, kept.finish_reason["type"], kept.broken) == ("completed", "length", None)
    fake.behaviour = lambda body: "ignore_stop"
    ignored = send(fake, plan(12, stop=("ef",)), incremental=incremental)
    assert (ignored.outcome, ignored.broken) == ("malformed", "stop string 'ef' in the output")
    fake.behaviour = lambda body: "no_logprob"
    short = send(fake, plan(12, logprobs=True), incremental=incremental)
    assert (short.outcome, short.broken) == ("malformed", "11 logprobs for 12 tokens")
    fake.behaviour = lambda body: "no_trim"
    leaked = send(fake, plan(12, stop=("ef",)), incremental=incremental)
    assert (leaked.outcome, leaked.broken) == ("malformed", "stop string 'ef' in the output")


def test_a_stop_request_that_ran_past_its_length_is_truncated() -> None:
    assert result(tokens=13, completion_tokens=13, stop=("ef",), done=True,
                  finish_reason={"type": "stop", "matched": "ef"}).outcome == "truncated"
    assert result(tokens=5, completion_tokens=5, stop=("ef",), done=True,  # not its string
                  finish_reason={"type": "stop", "matched": "gh"}).outcome == "truncated"


def test_a_request_dropped_before_its_first_token(fake: FakeSGLang) -> None:
    fake.behaviour = lambda body: "endless"  # the server streams until it sees the client gone
    dropped = send(fake, plan(200, abort_at=0, rid="early"))
    assert (dropped.outcome, dropped.tokens, dropped.ttft_s) == ("aborted", 0, None)
    assert dropped.exercised() == ["dropped before a token"]
    assert fake.wait_disconnected("early")


@pytest.mark.parametrize("behaviour, outcome, error", [
    ("short", "truncated", None),
    ("error", "lost", "server: {'message': 'bad request', 'code': 400}"),
    ("http500", "lost", "HTTP 500: boom"),
    ("drop", "lost", "the stream ended without data: [DONE]"),
])
def test_failures_are_classified(fake: FakeSGLang, behaviour: str, outcome: str,
                                 error: Optional[str]) -> None:
    fake.behaviour = lambda body: behaviour
    result = send(fake, plan(12))
    assert (result.outcome, result.error) == (outcome, error)


def test_a_stalled_stream_is_hung(fake: FakeSGLang) -> None:
    fake.behaviour = lambda body: "stall"  # two tokens, then nothing for STALL_S
    result = send_in_virtual_time(fake, plan(12), timeout=0.3)
    assert result.outcome == "hung" and result.tokens == 2 and not result.done
    assert result.latency_s == pytest.approx(0.3)  # its deadline, not the stall's end


def test_a_refused_connection_is_lost() -> None:
    result = asyncio.run(_send_to("http://127.0.0.1:9", plan()))  # discard port: nobody listens
    assert result.outcome == "lost" and result.error.startswith("ClientConnectorError")


async def _send_to(url: str, p: RequestPlan) -> soak_load.RequestResult:
    async with soak_load.client_session() as session:
        return await request(session, url, p, 5.0, False)


def test_client_abort_drops_the_stream(fake: FakeSGLang) -> None:
    fake.behaviour = lambda body: "endless" if body["rid"] == "gone" else "ok"
    result = send(fake, plan(200, abort_at=5, rid="gone"))
    assert result.outcome == "aborted" and result.tokens == 5 and result.error is None
    assert fake.wait_disconnected("gone")  # the server saw the client go away
    finished_first = send(fake, plan(12, abort_at=20))  # the abort point is never reached
    assert finished_first.outcome == "completed" and not finished_first.aborted


def drive(fake: FakeSGLang, wave: Wave, duration: float, plans: soak_load.Planner, max_failures: int = 100,
          timeout: float = 5.0) -> tuple[Load, list[soak_load.RequestResult]]:
    """soak_load.drive against the fake in-process, on the virtual clock from 0: exact times."""
    load, results = Load(), []

    async def go() -> None:
        await soak_load.drive(fake.session(), fake.url, wave, duration, plans, soak_start=soak_load.loop_time(),
                              timeout=timeout, incremental=False, max_failures=max_failures, load=load,
                              on_result=results.append)
    virtual_time.run(go())
    return load, results


MIX = Mix(prompt_lens=(4, 16), output_lens=(8, 24), abort_fraction=0.25, sampled_fraction=0.5,
          vocab_size=1000)


def in_flight_at(results: list[soak_load.RequestResult], t: float) -> int:
    return sum(r.start_s <= t < r.start_s + r.latency_s for r in results)


def test_drive_follows_the_wave_and_drains(fake: FakeSGLang) -> None:
    load, results = drive(fake, Wave(1, 6, period=0.6, shape="square"), 1.2, MIX.plans(0, "d"))
    assert load.in_flight == 0 and load.target == 0  # drained
    assert sum(load.counts.values()) == len(results)
    assert {r.outcome for r in results} == {"completed", "aborted"}
    assert load.counts["aborted"] == sum(r.aborted for r in results) > 0
    assert max(r.start_s for r in results) < 1.2  # none launched after the duration
    # The client's concurrency, from each request's start and end, every 10 ms (between the
    # fake's 2 ms events): the wave's 1 or 6 throughout each half-period, once a rise has been
    # read (within a request, 50 ms at most) and a fall has drained (within the longest, 52 ms).
    in_flight = {round(t / 1000, 3): in_flight_at(results, t / 1000) for t in range(5, 1200, 10)}
    for start, target in ((0.0, 1), (0.3, 6), (0.6, 1), (0.9, 6)):
        settled = {n for t, n in in_flight.items() if start + 0.06 < t < start + 0.3}
        assert settled == {target}, (start, settled)
    assert max(in_flight.values()) == 6


def test_drive_stops_after_too_many_failures(fake: FakeSGLang) -> None:
    fake.behaviour = lambda body: "http500"  # each request fails TOKEN_DELAY_S after it is sent
    load, results = drive(fake, Wave(2, 4, period=1), 10, MIX.plans(0, "d"), max_failures=5)
    # Two requests in flight fail together: the third pair passes 5, and nothing follows it.
    assert load.stopped_early and load.counts["lost"] == len(results) == 6
    assert max(r.start_s for r in results) == pytest.approx(2 * TOKEN_DELAY_S)


# --------------------------------------------------------------------------- samples


def test_take_sample(fake: FakeSGLang) -> None:
    sample = soak.take_sample(fake.url, os.getpid(), 1.5, Load(target=3, in_flight=2))
    assert sample["gate"]["threshold"] == 4 and sample["server_info_error"] is None
    assert sample["host_rss_mib"] > 10
    assert (sample["t"], sample["target"], sample["in_flight"]) == (1.5, 3, 2)
    assert sample["outcomes"] == dict.fromkeys(soak_load.OUTCOMES, 0)
    if sample["gpu_memory_mib"] is not None:  # a machine with nvidia-smi
        assert sample["gpu_memory_mib"] == sum(sample["gpu_memory_mib_per_gpu"])
    gone = soak.take_sample("http://127.0.0.1:9", None, 0, Load())
    assert gone["gate"] is None and "URLError" in gone["server_info_error"]
    assert gone["host_rss_mib"] is None


def test_listening_pid_finds_the_server(fake: FakeSGLang) -> None:
    assert memory.listening_pid(fake.url) in (os.getpid(), None)  # None where psutil may not look


# --------------------------------------------------------------------------- verdict


def samples(gpu: list[Optional[float]], host: list[Optional[float]],
            switches: list[int]) -> list[dict]:
    return [{"t": 10.0 * i, "gpu_memory_mib": g, "host_rss_mib": h, "server_info_error": None,
             "gate": {"decode_steps_spec": 10 * s, "decode_steps_plain": 20 * s, "switches": s}}
            for i, (g, h, s) in enumerate(zip(gpu, host, switches))]


COUNTS = {"completed": 90, "aborted": 10, "lost": 0, "truncated": 0, "malformed": 0, "hung": 0}
ALIVE = (True, "a 16-token request after the soak took 0.10 s")
EXERCISED = dict.fromkeys(soak_load.EXERCISED, 3)
ALL_PLANNED = dict.fromkeys(soak_load.EXERCISED, True)
QUEUED = {"max_queue": 12, "retracted": 4}


def judge(counts: dict, rows: list[dict], alive: tuple[bool, str] = ALIVE,
          pool_failures: Optional[Sequence[str]] = (), exercised: dict = EXERCISED,
          planned: dict = ALL_PLANNED, log_stats: Optional[dict] = QUEUED) -> dict:
    return soak_verdict.verdict(counts, rows, alive=alive, pool_failures=pool_failures, warmup=20, settle=20,
                        max_gpu_growth=0.02, max_host_growth=0.02, min_switches=2, aborts_planned=True,
                        exercised=exercised, exercise_planned=planned, log_stats=log_stats,
                        bursts_planned=True)


def test_verdict_passes_with_flat_memory() -> None:
    # Growth during the warm-up (first two samples) does not count.
    rows = samples([500, 900, 1000, 1010, 1000, 1005], [100, 200, 300, 303, 301, 300],
                   [0, 1, 3, 5, 6, 8])
    v = judge(COUNTS, rows)
    assert v["passed"], v["criteria"]
    assert v["requests"] == {"total": 100, **COUNTS}
    assert v["gate"]["delta"] == {"decode_steps_spec": 80, "decode_steps_plain": 160,
                                  "switches": 8}
    assert v["memory"]["gpu_mib"] == {"scope": "whole GPUs", "samples": 4, "first": 1000, "last": 1005, "max": 1010,
                                      "growth": pytest.approx(0.005),
                                      "max_growth": pytest.approx(0.01)}
    assert [c["status"] for c in v["criteria"]] == ["pass"] * 15 + ["skip"] + ["pass"] * 2
    assert v["exercised"] == EXERCISED and v["server_log"] == QUEUED
    # On FlashInfer the gate serves host lengths: every one must have been the GPU's.
    rows[-1]["gate"]["host_seq_lens"] = {"resolved_on_host": 900, "copied_back": 80, "disagreed": 0,
                                         "stood_down": False}
    assert {c["name"]: c["status"] for c in judge(COUNTS, rows)["criteria"]}["host lengths agreed"] == "pass"
    rows[-1]["gate"]["host_seq_lens"].update(disagreed=3, stood_down=True)
    v = judge(COUNTS, rows)
    assert not v["passed"]
    assert {c["name"]: c["detail"] for c in v["criteria"]}["host lengths agreed"] == \
        "900 batches served, 3 lengths disagreed with the GPU's"


def test_verdict_fails_on_each_criterion() -> None:
    rows = samples([1000, 1000, 1000, 1030, 1060, 1100], [300] * 6, [0, 0, 1, 1, 1, 1])
    bad = {"completed": 0, "aborted": 3, "lost": 2, "truncated": 1, "malformed": 1, "hung": 1}
    v = judge(bad, rows, alive=(False, "the server exited with status -9"))
    assert not v["passed"]
    rows[3]["server_info_error"] = "TimeoutError: timed out"
    v = judge({**bad, "aborted": 0}, rows, alive=(False, "the server exited with status -9"),
              exercised={**EXERCISED, "logprobs": 0}, log_stats={"max_queue": 9, "retracted": 0})
    status = {c["name"]: c["status"] for c in v["criteria"]}
    assert status == {"server alive": "fail", "scheduler responsive": "fail", "pools intact when idle": "pass",
                      "no lost requests": "fail", "no truncated requests": "fail", "no malformed requests": "fail",
                      "no hung requests": "fail", "requests completed": "fail", "client aborts exercised": "fail",
                      "exercised: logprobs": "fail", "exercised: stopped by a string": "pass",
                      "exercised: long prompts above N": "pass", "exercised: dropped before a token": "pass",
                      "bursts queued and retracted": "fail", "gate switched": "fail",
                      "host lengths agreed": "skip", "GPU memory": "fail", "host memory": "pass"}
    detail = {c["name"]: c["detail"] for c in v["criteria"]}
    assert detail["GPU memory"] == "1000 -> 1100 MiB (whole GPUs), largest growth +10.00% (limit 2%)"
    assert detail["bursts queued and retracted"] == "longest queue 9, 0 requests retracted"
    assert detail["exercised: logprobs"] == "0 requests"


def test_what_the_load_does_not_plan_is_skipped_not_failed() -> None:
    rows = samples([1000] * 6, [300] * 6, [0, 1, 3, 5, 6, 8])
    none = dict.fromkeys(soak_load.EXERCISED, 0)
    v = judge(COUNTS, rows, exercised=none, planned=dict.fromkeys(soak_load.EXERCISED, False),
              log_stats=None)
    assert v["passed"], v["criteria"]
    rows_by_name = {c["name"]: (c["status"], c["detail"]) for c in v["criteria"]}
    assert rows_by_name["exercised: logprobs"] == ("skip", "none planned")
    assert rows_by_name["bursts queued and retracted"] == \
        ("skip", "attached server (--url): its log is not read")


def test_queue_and_retractions_are_read_from_the_server_log(tmp_path: Path) -> None:
    # As SGLang 0.5.17's scheduler logs them (metrics_reporter.py; scheduler.py's retraction).
    log = tmp_path / "server.log"
    log.write_text(
        "[2026-12-06 10:00:00] Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 0, "
        "token usage: 0.40, #running-req: 14, #queue-req: 7, #pending-token: 0, \n"
        "[2026-12-06 10:00:01] Decode batch, #running-req: 16, #token: 9000, token usage: 0.90, "
        "cuda graph: True, gen throughput (token/s): 900.00, #queue-req: 18\n"
        "[2026-12-06 10:00:02] KV cache pool is full. Retract requests. #retracted_reqs: 2, "
        "#new_tokens_gained: 1800, #new_token_ratio: 0.3000 -> 0.6000\n"
        "[2026-12-06 10:00:03] KV cache pool is full. Retract requests. #retracted_reqs: 1, "
        "#new_tokens_gained: 700, #new_token_ratio: 0.5000 -> 0.6000\n"
        "[2026-12-06 10:00:04] Testing retraction. #retracted_reqs: 5, #new_tokens_gained: 10\n")
    assert soak_verdict.queue_and_retractions(log) == {"max_queue": 18, "retracted": 3}


def test_verdict_judges_the_servers_own_gpu_memory_where_known() -> None:
    # Another tenant of the GPU started mid-soak: the device total grew, the server did not.
    rows = samples([1000, 1000, 1000, 5000, 5000, 5000], [300] * 6, [0, 1, 3, 5, 6, 8])
    for row in rows:
        row["server_gpu_memory_mib"] = 900
    v = judge(COUNTS, rows)
    assert v["passed"], v["criteria"]
    assert v["memory"]["gpu_mib"]["scope"] == "server processes"


def test_verdict_fails_what_was_not_measured() -> None:
    # A soak exists to see these: a server without the gate, or memory nobody read, is no pass.
    rows = [{**s, "gate": None} for s in samples([None] * 4, [None, None, 300, None], [0] * 4)]
    v = judge(COUNTS, rows)
    assert not v["passed"] and v["gate"] is None
    detail = {c["name"]: (c["status"], c["detail"]) for c in v["criteria"]}
    assert detail["gate switched"] == ("fail", "the server reports no spec gate")
    assert detail["GPU memory"][0] == detail["host memory"][0] == "fail"


def test_a_gate_that_never_turned_off_fails() -> None:
    rows = samples([1000] * 6, [300] * 6, [0, 1, 3, 5, 6, 8])
    for row in rows:
        row["gate"]["decode_steps_plain"] = 0
    v = judge(COUNTS, rows)
    assert not v["passed"]
    assert {c["name"]: c["detail"] for c in v["criteria"]}["gate switched"] == \
        "8 switches (at least 2); decode steps 80 speculative, 0 plain"


def test_a_stall_before_the_warm_up_ends_is_not_judged_but_one_after_is() -> None:
    rows = samples([1000] * 6, [300] * 6, [0, 1, 3, 5, 6, 8])
    rows[1]["server_info_error"] = "TimeoutError: timed out"  # t = 10 s, in the warm-up
    assert judge(COUNTS, rows)["passed"]
    rows[4]["server_info_error"] = "TimeoutError: timed out"
    detail = {c["name"]: c["detail"] for c in judge(COUNTS, rows)["criteria"]}
    assert detail["scheduler responsive"] == ("/server_info failed in 1 of 4 samples after the warm-up, "
                                              "first at 40 s: TimeoutError: timed out")


# As SGLang 0.5.17's strict idle check ends the scheduler's traceback (InvariantChecker._report_leak).
LEAK = ("ValueError: pool memory leak detected! [full] total=1016, available=1000, evictable=0, "
        "protected=0, session_held=0, uncached=0\n")


def test_verdict_fails_on_what_sglangs_idle_pool_check_logged() -> None:
    rows = samples([1000] * 6, [300] * 6, [0, 1, 3, 5, 6, 8])

    def pools(pool_failures: Optional[list[str]]) -> tuple[bool, tuple[str, str]]:
        v = judge(COUNTS, rows, pool_failures=pool_failures)
        return v["passed"], next((c["status"], c["detail"]) for c in v["criteria"]
                                 if c["name"] == "pools intact when idle")

    assert pools([]) == (True, ("pass", "SGLang's idle pool check logged no failure, also after the drain"))
    assert pools([LEAK, "KV double free: sub-pool 0 has 2 duplicate pages.\n"]) == (False, (
        "fail", "SGLang's idle pool check failed (2 lines in the server log), first: " + LEAK.strip()))
    assert pools(["x" * 500])[1][1].endswith(": " + "x" * 200)
    assert pools(None) == (True, ("skip", "attached server (--url): its log is not read"))


def test_pool_check_failures_are_read_from_the_server_log(tmp_path: Path) -> None:
    failures = [LEAK,
                "req_to_token_pool memory leak detected!available_size=30, session_held=0, total_size=32\n",
                "[2026-12-05 10:00:00 TP0] KV double free: sub-pool 0 has 2 duplicate pages.\n",
                ("[2026-12-05 10:00:00 TP0] KV page use-after-free: 3 owner page refs are in the free pool, "
                 "sample pages=[4, 5, 6].\n")]
    log = tmp_path / "server.log"
    log.write_bytes("".join(["[2026-12-05 09:59:59] INFO: Prefill batch, #new-token: 16\n", failures[0],
                             "Traceback (most recent call last):\n", *failures[1:],
                             "Scheduler hit an exception\n"]).encode() + b"\xff not UTF-8\n")
    assert soak_verdict.pool_check_failures(log) == failures


def test_memory_baseline_is_the_settled_level_not_a_stall_sample() -> None:
    # As in one FlashInfer soak on the GPU host: the first sample after the warm-up, taken in a
    # stall, sat above the level the server kept; growth from it would hide a leak that size.
    rows = samples([1000] * 7, [5314, 5314, 5314, 5181, 5181, 5290, 5290], [0, 1, 3, 5, 6, 8, 9])
    stats = judge(COUNTS, rows)["memory"]["host_rss_mib"]
    assert (stats["first"], stats["max"]) == (5181, 5290) and stats["max_growth"] == pytest.approx(109 / 5181)


def test_memory_that_grows_then_falls_back_fails() -> None:
    rows = samples([1000, 1000, 1000, 1100, 1000, 1000], [300] * 6, [0, 1, 3, 5, 6, 8])
    assert not judge(COUNTS, rows)["passed"]


# --------------------------------------------------------------------------- the script


def soak_args(run_dir: Path, url: str, *extra: str) -> list[str]:
    return ["--url", url, "--run-dir", str(run_dir), "--duration", "1.5", "--period", "0.5",
            "--warmup", "0.5", "--sample-interval", "0.25", "--prompt-lens", "4,16",
            "--output-lens", "8,24", "--abort-fraction", "0.3", "--prefill-abort-fraction", "0.1",
            "--logprob-fraction", "0.3", "--stop-fraction", "0.3", "--long-prompt-len", "64",
            "--long-prompt-fraction", "0.3", "--burst-every", "1", "--burst-seconds", "0.25",
            "--max-host-growth", "1.0",  # the fake's "server" process is pytest itself
            *extra]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_soak(fake: FakeSGLang, run_dir: Path, *extra: str, server_log: Optional[Path] = None) -> int:
    """soak.soak as main() runs it on an attached server, its load in-process on the virtual
    clock (server_info, the stop strings' calibration and the samples still go over HTTP)."""
    run = soak.Run(soak.parse_args(soak_args(run_dir, fake.url, *extra)))
    run.dir.mkdir()
    return soak.soak(run, fake.url, os.getpid(), proc=None, server_log=server_log, connect=fake.session,
                     run_load=virtual_time.run)


def test_soak_against_a_healthy_server_passes(fake: FakeSGLang, tmp_path: Path, monkeypatch,
                                              capsys: pytest.CaptureFixture) -> None:
    # No GPU here: nvidia-smi's reading stands in, flat (memory not measured fails a soak).
    monkeypatch.setattr(soak, "gpu_memory_mib", lambda: [1000])
    run = tmp_path / "run"
    assert run_soak(fake, run) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["passed"] and summary["threshold"] == 4  # read from the server's spec_gate
    # A burst doubles the server's 8 running requests by default.
    assert summary["wave"] == {"low": 2, "high": 8, "period": 0.5, "shape": "triangle", "burst": 8,
                               "burst_every": 1.0, "burst_s": 0.25}
    assert summary["attention_backend"] == "fake" and summary["commit"]
    assert summary["stop_strings"] == ["ab"]  # the fake's outputs all begin "abcd..."
    assert all(n > 0 for n in summary["exercised"].values()), summary["exercised"]
    assert summary["gate"]["delta"]["switches"] > 0
    requests = read_jsonl(run / "requests.jsonl")
    assert len(requests) == summary["requests"]["total"]
    assert {r["outcome"] for r in requests} == {"completed", "aborted"}
    assert set(requests[0]) >= {"id", "prompt_len", "max_new_tokens", "aborted", "tokens",
                                "finish_reason", "latency_s", "error", "outcome"}
    assert max(r["start_s"] for r in requests) < 1.5 <= summary["elapsed_s"]  # the load's 1.5 s, then the drain
    rows = read_jsonl(run / "samples.jsonl")
    # The baseline before any request, one every 0.25 s of the load, and one after the drain.
    assert [row["t"] for row in rows[:-1]] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5]
    assert rows[0]["outcomes"] == dict.fromkeys(soak_load.OUTCOMES, 0) and rows[0]["in_flight"] == 0
    assert rows[-1]["in_flight"] == 0 and sum(rows[-1]["outcomes"].values()) == len(requests)
    assert "# Soak soak: PASS" in (run / "summary.md").read_text()
    out = capsys.readouterr().out
    assert "| server alive | pass |" in out
    assert "| pools intact when idle | skip | attached server (--url): its log is not read |" in out


def test_a_failed_pool_check_in_the_server_log_fails_the_soak(fake: FakeSGLang, tmp_path: Path,
                                                             monkeypatch) -> None:
    monkeypatch.setattr(soak, "gpu_memory_mib", lambda: [1000])
    monkeypatch.setattr(soak, "IDLE_CHECK_WAIT_S", 0)
    log = tmp_path / "server.log"
    log.write_text(LEAK)
    assert run_soak(fake, tmp_path / "run", "--burst", "0", server_log=log) == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [c["name"] for c in summary["criteria"] if c["status"] == "fail"] == ["pools intact when idle"]


def test_soak_fails_on_truncated_requests(fake: FakeSGLang, tmp_path: Path) -> None:
    fake.behaviour = lambda body: "short" if body["sampling_params"]["max_new_tokens"] == 24 \
        else "ok"
    assert run_soak(fake, tmp_path / "run", "--abort-fraction", "0") == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["requests"]["truncated"] > 0 and not summary["passed"]
    assert "| no truncated requests | fail |" in (tmp_path / "run" / "summary.md").read_text()


def test_the_default_warm_up_covers_two_periods_and_the_first_burst() -> None:
    args = soak.parse_args(["--url", "http://x", "--duration", "1200", "--period", "60"])
    assert args.warmup is None
    assert soak.warmup_s(args, Wave(4, 16, 60, burst=16, burst_every=240, burst_s=20)) == 240
    assert soak.warmup_s(args, Wave(4, 16, 60)) == 120
    short = soak.parse_args(["--url", "http://x", "--duration", "200", "--period", "60"])
    with pytest.raises(SystemExit, match="lengthen it or pass --warmup"):
        soak.warmup_s(short, Wave(4, 16, 60, burst=16, burst_every=240, burst_s=20))
    explicit = soak.parse_args(["--url", "http://x", "--duration", "200", "--warmup", "30"])
    assert soak.warmup_s(explicit, Wave(4, 16, 60, burst=16, burst_every=240, burst_s=20)) == 30


def test_dry_run_prints_the_gated_server(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = soak.main(["--model-path", "/m/t", "--draft-model-path", "/m/d", "--threshold", "8",
                      "--run-dir", str(tmp_path / "run"), "--dry-run", "--",
                      "--attention-backend", "triton"])
    out = capsys.readouterr().out
    assert code == 0 and not (tmp_path / "run").exists()
    server = next(line for line in out.splitlines() if "sglang.launch_server" in line)
    assert "--speculative-disable-batch-threshold 8" in server
    assert "--max-running-requests 16 --cuda-graph-max-bs 16" in server  # the wave's 2N
    assert server.endswith("--attention-backend triton")


@pytest.mark.parametrize("bad", [
    ["--url", "http://x", "--", "--tp-size", "2"],  # flags for a server it does not start
    ["--model-path", "/m/t", "--draft-model-path", "/m/d"],  # no threshold
    ["--url", "http://x", "--warmup", "100", "--duration", "60"],
    # A tree of no given size.
    ["--model-path", "/m/t", "--draft-model-path", "/m/d", "--threshold", "8", "--speculative-eagle-topk", "4"],
])
def test_soak_rejects_bad_options(bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        soak.parse_args(bad)


# --------------------------------------------------------------------------- outcomes and accounting


def result(**fields) -> RequestResult:
    r = RequestResult(id=0, rid="r", start_s=0, prompt_len=3, max_new_tokens=12, sampled=False, abort_at=None)
    for name, value in fields.items():
        setattr(r, name, value)
    return r


@pytest.mark.parametrize("tokens, completion_tokens, finish_reason, outcome", [
    (12, 12, {"type": "length"}, "completed"),
    (12, 12, {"type": "abort"}, "truncated"),  # the server ended it, not the length limit
    (12, 11, {"type": "length"}, "truncated"),  # the server's count disagrees with the stream
    (11, 12, {"type": "length"}, "truncated"),
    (12, None, {"type": "length"}, "truncated"),
])
def test_a_request_completes_only_with_every_token_counted_by_both_sides(tokens, completion_tokens,
                                                                       finish_reason, outcome) -> None:
    assert result(tokens=tokens, completion_tokens=completion_tokens, finish_reason=finish_reason,
                  done=True).outcome == outcome


def test_an_abort_point_on_the_last_token_completes(fake: FakeSGLang) -> None:
    assert send(fake, plan(12, abort_at=12)).outcome == "completed"


def test_every_launched_request_is_counted_even_if_it_hangs_past_the_end(fake: FakeSGLang) -> None:
    fake.behaviour = lambda body: "stall"  # longer than the soak
    drawn = []

    class Recorded(soak_load.Planner):
        def next(self, target: int) -> RequestPlan:
            drawn.append(super().next(target))
            return drawn[-1]

    load, results = drive(fake, Wave(2, 4, 0.4), 0.3, Recorded(MIX, random.Random(0), "d"), timeout=0.8)
    assert len(results) == len(drawn) == sum(load.counts.values())
    assert load.counts["hung"] == len(drawn) - load.counts["aborted"] - load.counts["completed"] > 0
    # Each hung request ended at its deadline, past the soak's end.
    assert [r.latency_s for r in results if r.hung] == [pytest.approx(0.8)] * load.counts["hung"]


def test_hung_requests_count_towards_stopping_early(fake: FakeSGLang) -> None:
    fake.behaviour = lambda body: "stall"
    load, results = drive(fake, Wave(2, 4, 1), 5, MIX.plans(0, "d"), max_failures=3, timeout=0.2)
    assert load.stopped_early and load.counts["hung"] >= 3
    assert max(r.start_s for r in results) < 1  # it stopped within the first second of five


def test_server_alive_needs_a_running_server_and_a_complete_probe() -> None:
    done = result(tokens=16, max_new_tokens=16, completion_tokens=16, finish_reason={"type": "length"},
                  done=True, latency_s=0.1)
    assert soak.server_alive(None, done)[0]
    exited = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    exited.wait()
    assert soak.server_alive(exited, done) == (False, "the server exited with status 3")
    for bad in (result(hung=True), result(tokens=5, completion_tokens=5, finish_reason={"type": "length"})):
        assert not soak.server_alive(None, bad)[0]


def test_the_server_process_tree_includes_its_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in {p.pid for p in memory.process_tree(os.getpid())}
    finally:
        child.kill()
        child.wait()


def test_server_gpu_memory_counts_only_its_processes(monkeypatch) -> None:
    # nvidia-smi's per-process rows, stood in for: no GPU here.
    monkeypatch.setattr(memory, "nvidia_smi", lambda query: [["1", "100"], ["2", "200"]])
    assert memory.server_gpu_memory_mib({1}) == 100
    assert memory.server_gpu_memory_mib({3}) is None
