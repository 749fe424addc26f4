"""benchmark/client/serving_session.py runs SGLang's real benchmark client (sglang.benchmark.serving's cli_main)
several times in one process. The server is a fake: it answers what that client asks of SGLang
(/v1/models, /flush_cache, a streamed /generate, /server_info), as no SGLang server runs on a CPU."""

from __future__ import annotations

import json
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
from threaded_server import JSONHandler, serving

from benchmark.client import commands, prompts, serving_session, sweep
from benchmark.pairs import model_pair
from benchmark.servers import config


class FakeServing(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.generated = 0
        self.lock = threading.Lock()
        self.model_path = ""  # /v1/models names it; SGLang names the --model-path it serves

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(JSONHandler):
    server: FakeServing

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            self.reply({"object": "list", "data": [{"id": self.server.model_path, "object": "model"}]})
        else:  # /server_info
            self.reply({"internal_states": [{"avg_spec_accept_length": 1.0}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path != "/generate":  # /flush_cache
            self.reply({})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        n = body["sampling_params"]["max_new_tokens"]
        for i in range(1, n + 1):
            chunk = {"text": "x" * i, "meta_info": {"completion_tokens": i}}
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        with self.server.lock:
            self.server.generated += 1


@pytest.fixture()
def fake() -> Iterator[FakeServing]:
    with serving(FakeServing()) as server:
        yield server


def test_one_process_serves_runs_in_turn(tmp_path: Path) -> None:
    with serving_session.Session(tmp_path / "session.log") as client:
        assert client.run(["--help"], tmp_path / "help.log") == 0
        assert client.run(["--no-such-flag"], tmp_path / "bad.log") == 2
        assert client.run(["--help"], tmp_path / "help2.log") == 0  # still serving
    assert client.proc.returncode == 0  # stdin closed: the session ended on its own
    assert "usage:" in (tmp_path / "help.log").read_text()
    assert "unrecognized arguments: --no-such-flag" in (tmp_path / "bad.log").read_text()


def test_a_dead_session_fails_the_run(tmp_path: Path) -> None:
    client = serving_session.Session(tmp_path / "session.log")
    client.proc.kill()
    client.proc.wait()
    assert client.run(["--help"], tmp_path / "x.log") == 1
    client.close()


def test_arguments_of_a_command_line() -> None:
    cmd = [sys.executable, "-m", "sglang.benchmark.serving", "--num-prompts", "4"]
    assert serving_session.arguments_of(cmd) == ["--num-prompts", "4"]
    with pytest.raises(ValueError, match="not a sglang.benchmark.serving command line"):
        serving_session.arguments_of([sys.executable, "other.py"])


def test_sweep_levels_in_one_client_process(fake: FakeServing, tmp_path: Path) -> None:
    # Two closed-loop levels through the real client, as the sweep builds them: each writes
    # its row to raw.jsonl and its output to its own log.
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    model_pair.write_tokenizer(str(tokenizer))
    fake.model_path = str(tokenizer)
    dataset = tmp_path / "prompts.jsonl"
    prompts.write_jsonl(prompts.generate(16, seed=0, tool_fraction=0.5), dataset)
    args = sweep.parse_args(["--model-path", str(tokenizer), "--configs", "plain",
                             "--run-dir", str(tmp_path / "run"), "--output-len", "8",
                             "--port", str(fake.server_address[1])])
    raw, logs = tmp_path / "raw.jsonl", []
    with serving_session.Session(tmp_path / "session.log", env=commands.client_env()) as client:
        for c in (1, 4):
            cmd = commands.bench_command(args, url=config.base_url(args), tag=f"plain,c={c}", dataset=dataset,
                                         output_file=raw, num_prompts=4, concurrency=c, warmup=1,
                                         flush_cache=True)
            logs.append(tmp_path / f"c{c}.log")
            assert client.run(serving_session.arguments_of(cmd), logs[-1]) == 0, logs[-1].read_text()
    rows = [json.loads(line) for line in raw.read_text().splitlines()]
    assert [(r["tag"], r["completed"], r["max_concurrency"]) for r in rows] == [
        ("plain,c=1", 4, 1), ("plain,c=4", 4, 4)]
    assert all(r["server_info"]["internal_states"][0]["avg_spec_accept_length"] == 1.0 for r in rows)
    assert fake.generated == 2 * (4 + 1)  # prompts and warm-up request of both levels
    assert all("Benchmark duration" in log.read_text() for log in logs)
