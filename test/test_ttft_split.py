"""ttft_split.py: a one-token request's TTFT split from SGLang's meta_info stamps, and the probe
that sends such requests during a level. A stand-in HTTP server answers /generate (a server
needs a GPU); its meta_info carries the stamp names of observability/req_time_stats.py."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from benchmark.analysis import ttft_split
from benchmark.client import ttft_probe
from threaded_server import serving

# Received at 100 s; sent to the scheduler 2 ms later; queued at 100.040 for 10 ms; prefilled by
# 100.090; the tokenizer manager had the output at 100.300.
META = {"request_received_ts": 100.0, "api_server_dispatch_finish_ts": 100.002,
        "forward_entry_time": 100.050, "queue_time": 0.010, "prefill_finished_time": 100.090,
        "request_finished_ts": 100.300}


def test_a_one_token_requests_stages() -> None:
    assert ttft_split.split_ms(META) == {
        "tokenize": 2.0, "to_scheduler": 38.0, "queue": 10.0, "prefill": 40.0, "back": 210.0}


def test_a_server_without_metrics_gives_no_split() -> None:
    assert ttft_split.split_ms({k: v for k, v in META.items() if k != "forward_entry_time"}) is None


def test_medians_per_stage() -> None:
    splits = [dict.fromkeys(ttft_split.STAGES, float(v)) for v in (1, 5, 2)]
    assert ttft_split.medians(splits) == {"probes": 3, **dict.fromkeys(ttft_split.STAGES, 2.0)}
    assert ttft_split.medians([]) is None


def test_prompts_are_the_datasets_last_user_turns(tmp_path: Path) -> None:
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"conversations": [{"role": "user", "content": f"q{i}"},
                                                             {"role": "assistant", "content": "a"}]}) + "\n"
                               for i in range(5)))
    assert ttft_probe.prompt_texts(dataset, 2) == ["q3", "q4"]


class Generate(BaseHTTPRequestHandler):
    """/generate: records the payload; answers with META, or without stamps once asked to."""

    def do_POST(self) -> None:
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.payloads.append(payload)
        if len(self.server.payloads) == 3:
            self.server.three_answered.set()  # once this answer is sent: the probe's turn after it
        meta = META if self.server.stamped else {}
        body = json.dumps({"text": "x", "meta_info": meta}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def probe_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ttft-probe"]


@pytest.mark.parametrize("stamped", [True, False], ids=["with metrics", "without"])
def test_the_probe_sends_one_token_requests_until_closed(stamped: bool) -> None:
    server = HTTPServer(("127.0.0.1", 0), Generate)
    server.payloads, server.stamped, server.three_answered = [], stamped, threading.Event()
    with serving(server):
        url = f"http://127.0.0.1:{server.server_port}"
        with ttft_probe.Probe(url, ["p0", "p1"], interval_s=0.01) as probe:
            assert server.three_answered.wait(timeout=60)  # a bound, not a pace
        assert probe_threads() == []  # closing the probe ended its sender: none after the level
        sent = len(server.payloads)
    assert sent >= 3 and [p["text"] for p in server.payloads[:3]] == ["p0", "p1", "p0"]
    assert server.payloads[0]["sampling_params"] == {"max_new_tokens": 1, "temperature": 0.0}
    summary = probe.summary()
    if stamped:
        assert summary == {"probes": sent, **ttft_split.split_ms(META)}
    else:
        assert summary == {"probes": 0, "errors": sent}  # said, not dropped


@pytest.mark.parametrize("failure", [ConnectionRefusedError("refused"), json.JSONDecodeError("no", "", 0)],
                         ids=["refused", "not JSON"])
def test_a_failed_probe_is_counted_and_the_level_goes_on(failure: Exception) -> None:
    calls, two_failed = [], threading.Event()

    def failing(url: str, payload: dict) -> dict:
        calls.append(payload)
        if len(calls) == 2:
            two_failed.set()
        raise failure

    with ttft_probe.Probe("http://127.0.0.1:9", ["p"], interval_s=0.01, post=failing) as probe:
        assert two_failed.wait(timeout=60)  # a bound, not a pace
    assert probe.errors >= 2 and probe.summary() == {"probes": 0, "errors": probe.errors}


def test_a_probe_closed_before_its_first_request_has_nothing_to_say() -> None:
    with ttft_probe.Probe("http://127.0.0.1:9", ["p"], interval_s=60) as probe:
        pass
    assert probe.summary() is None
