"""The workload-shift scenario: its schedule, the load it drives (on a virtual clock, against a
stand-in server whose replies follow the pair's design), its summary and its command line. The
servers need a GPU; test/gpu and the GPU plans run the real ones."""

from __future__ import annotations

import asyncio
import json
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
import virtual_time
from threaded_server import JSONHandler, serving

from benchmark.analysis.shift_tables import summary_markdown
from benchmark.client import shift
from benchmark.client.shift_load import ShiftSchedule, Walk, run_load
from benchmark.pairs.design import make_design

DESIGN = make_design("tiny", (3.2, 1.3), 0)


def walk() -> Walk:
    return Walk(json.loads(json.dumps(DESIGN.summary())))  # as read back from design.json


def test_the_schedule_switches_domain_every_phase_and_steps_the_concurrency():
    s = ShiftSchedule(domains=2, phases=3, phase_s=60, concurrency=(4, 64, 16), concurrency_s=20)
    assert s.duration_s == 180
    assert [s.domain_at(t) for t in (0, 59.9, 60, 130)] == [0, 0, 1, 0]
    assert [s.concurrency_at(t) for t in (0, 20, 45, 60, 179)] == [4, 64, 16, 4, 16]
    assert [s.next_change(t) for t in (0, 19.5, 50, 175)] == [20, 20, 60, 180]
    assert s.segment_seconds() == {(0, 4): 40, (0, 64): 40, (0, 16): 40, (1, 4): 20, (1, 64): 20, (1, 16): 20}
    # A level that straddles a domain change counts in both: 16 runs 40-60, split at 50.
    odd = ShiftSchedule(domains=2, phases=2, phase_s=50, concurrency=(4, 64, 16), concurrency_s=20)
    assert odd.segment_seconds() == {(0, 4): 20, (0, 64): 20, (0, 16): 10, (1, 16): 10, (1, 4): 20, (1, 64): 20}


@pytest.mark.parametrize("kwargs", [dict(domains=0), dict(domains=1, concurrency=()),
                                    dict(domains=1, concurrency=(0, 4)), dict(domains=1, phase_s=0)])
def test_a_schedule_that_cannot_run_is_refused(kwargs):
    with pytest.raises(ValueError):
        ShiftSchedule(**kwargs)


def test_the_walk_from_design_json_is_the_designs():
    w = walk()
    assert w.domains == 2
    for d in range(2):
        assert sorted(w.domain_tokens[d]) == sorted(DESIGN.domain_tokens(d))
        token = w.domain_tokens[d][5]
        assert w.continuation(token, 300) == DESIGN.continuation(token, 300)
    one = Walk(json.loads(json.dumps(make_design("tiny", 2.2, 0).summary())))  # a pair of one domain
    assert one.domains == 1 and len(one.domain_tokens[0]) == len(DESIGN.nxt)


class StandInServer:
    """Replies after a time that grows with the requests in flight; the design's continuation,
    or in ``wrong_domain`` a wrong first token."""

    def __init__(self, wrong_domain: int | None = None):
        self.in_flight = 0
        self.started: list[tuple[float, int, int]] = []  # (time, in flight, domain of the prompt)
        self.wrong_domain = wrong_domain

    async def post(self, payload: dict) -> dict:
        loop = asyncio.get_running_loop()
        last = payload["input_ids"][-1]
        domain = int(DESIGN.domain[DESIGN.coord[last]])
        self.in_flight += 1
        self.started.append((loop.time(), self.in_flight, domain))
        await asyncio.sleep(0.5 + 0.01 * self.in_flight)
        self.in_flight -= 1
        output = DESIGN.continuation(last, payload["sampling_params"]["max_new_tokens"])
        if domain == self.wrong_domain:
            output[0] += 1
        return {"output_ids": output}


def test_the_load_follows_the_schedule_and_checks_every_output():
    schedule = ShiftSchedule(domains=2, phases=4, phase_s=10, concurrency=(2, 8), concurrency_s=5)
    server = StandInServer()
    result = virtual_time.run(run_load(server.post, schedule, walk(), output_len=16, prompt_len=8))
    for t, in_flight, domain in server.started:
        assert domain == schedule.domain_at(t)  # each prompt ends in its phase's domain
        # Never more than the level allows, but for the last replies of a higher level before
        # (a reply takes under a second here).
        assert in_flight <= max(schedule.concurrency_at(t), schedule.concurrency_at(max(t - 1, 0)))
    # Each level is reached (requests a level started can outlast it by one reply).
    assert {n for _, n, _ in server.started} >= {2, 8}
    summary = result.summary()
    assert summary["mismatched"] == summary["errors"] == 0
    assert summary["output_tokens"] == 16 * summary["requests"]
    assert summary["output_throughput"] == pytest.approx(summary["output_tokens"] / result.end)
    assert result.end >= schedule.duration_s  # the last requests finish after the schedule ends
    assert [p["domain"] for p in summary["by_phase"]] == [0, 1, 0, 1]
    segments = {(s["domain"], s["concurrency"]): s for s in summary["by_segment"]}
    assert {key: s["seconds"] for key, s in segments.items()} == schedule.segment_seconds()
    assert sum(s["requests"] for s in segments.values()) == summary["requests"]
    assert sum(s["output_tokens"] for s in segments.values()) == summary["output_tokens"]
    # Two requests at a time against eight: the higher level starts about four times as many.
    assert segments[(0, 8)]["requests"] > 3 * segments[(0, 2)]["requests"]


def test_outputs_off_the_design_and_failures_are_counted():
    schedule = ShiftSchedule(domains=2, phases=2, phase_s=4, concurrency=(3,), concurrency_s=4)
    summary = virtual_time.run(run_load(StandInServer(wrong_domain=1).post, schedule, walk(),
                                        output_len=8, prompt_len=4)).summary()
    assert summary["mismatched"] == sum(p["requests"] for p in summary["by_phase"] if p["domain"] == 1) > 0

    async def failing(payload: dict) -> dict:
        await asyncio.sleep(1)
        raise ConnectionError("server gone")

    summary = virtual_time.run(run_load(failing, schedule, walk(), output_len=8, prompt_len=4)).summary()
    assert summary["errors"] == summary["requests"] > 0 and summary["output_tokens"] == 0
    assert summary["first_errors"][0] == "ConnectionError: server gone"


def test_the_same_prompts_reach_every_server():
    schedule = ShiftSchedule(domains=2, phases=2, phase_s=4, concurrency=(3,), concurrency_s=4)
    prompts = []
    for _ in range(2):
        seen = []

        async def record(payload: dict) -> dict:
            seen.append(payload["input_ids"])
            await asyncio.sleep(1)
            return {"output_ids": DESIGN.continuation(payload["input_ids"][-1], 8)}

        virtual_time.run(run_load(record, schedule, walk(), output_len=8, prompt_len=4, seed=7))
        prompts.append(seen)
    assert prompts[0] == prompts[1]


def row(config: str, rnd: int, tput: float, tokens=(600, 300), segments=None) -> dict:
    """A round's row; ``segments`` maps (domain, C) to output tokens in 5 s of the segment."""
    out = {"config": config, "round": rnd, "phase_s": 10, "output_throughput": tput, "mismatched": 0,
           "errors": 0, "by_phase": [{"domain": 0, "requests": 6, "output_tokens": tokens[0]},
                                     {"domain": 1, "requests": 3, "output_tokens": tokens[1]}]}
    if segments:
        out["by_segment"] = [{"domain": d, "concurrency": c, "seconds": 5, "requests": 1, "output_tokens": t}
                             for (d, c), t in segments.items()]
    return out


def test_the_summary_compares_auto_with_the_best_fixed_n_and_upstream_adaptive():
    rows = [row(name, r, tput) for r in range(3) for name, tput in
            (("plain", 100 + r), ("gate-4", 110), ("gate-16", 120 + r), ("gate-auto", 140), ("upstream-adaptive", 70))]
    text = summary_markdown(rows)
    assert "| gate-auto | 140.0 | 140 · 140 · 140 | 60 | 30 | 0 | 0 |" in text
    assert "| gate-auto / best fixed N (gate-16) | 1.157× |" in text  # 140 / median(120, 121, 122)
    assert "| gate-auto / upstream-adaptive | 2.000× |" in text
    assert "| gate-auto / plain | 1.386× |" in text
    assert "each segment" not in text  # rows from before segments were recorded: no segment table


def test_the_summary_puts_the_best_of_each_segment_together():
    # Domain 0 wants speculation at C = 4, domain 1 plain everywhere; auto gets most of both.
    segments = {"plain": {(0, 4): 100, (0, 64): 600, (1, 4): 100, (1, 64): 600},
                "gate-9": {(0, 4): 200, (0, 64): 600, (1, 4): 60, (1, 64): 600},
                "gate-auto": {(0, 4): 190, (0, 64): 590, (1, 4): 100, (1, 64): 580}}
    rows = [row(name, r, 80, segments=tokens) for r in range(2) for name, tokens in segments.items()]
    text = summary_markdown(rows)
    assert "| 0 | 4 | 5 | 20 | **40** | 38 |" in text  # tok/s: 2 rounds of 5 s each
    assert "| 1 | 64 | 5 | **120** | **120** | 116 |" in text
    assert "makes 75 tok/s over the schedule" in text  # (40 + 120 + 20 + 120) / 4
    assert "| gate-auto / best fixed N (gate-9), over the segments | 1.000× |" in text  # 73 / 73
    assert "| best of each segment / gate-9 | 1.027× |" in text
    assert "| best of each segment / gate-auto | 1.027× |" in text
    assert "put together from plain and spec" not in text  # no always-on server ran


def test_every_fixed_n_is_put_together_from_plain_and_spec_segments():
    # Levels 4 and 64 divide all N into plain (N < 4), speculating at C = 4 only, and always on.
    segments = {"plain": {(0, 4): 100, (0, 64): 600, (1, 4): 100, (1, 64): 600},
                "spec": {(0, 4): 200, (0, 64): 500, (1, 4): 60, (1, 64): 300},
                "gate-auto": {(0, 4): 190, (0, 64): 600, (1, 4): 100, (1, 64): 580}}
    rows = [row(name, 0, 80, segments=tokens) for name, tokens in segments.items()]
    # Plain makes 70 tok/s over the schedule, N = 4...63 73 ((40 + 120 + 12 + 120) / 4), always on 53.
    assert "| gate-auto / best fixed N put together from plain and spec (N = 4…63) | 1.007× |" in summary_markdown(rows)
    segments["spec"][(1, 4)] = 100  # speculation now costs domain 1 nothing at C = 4 ...
    segments["spec"][(1, 64)] = 800  # ... and wins at C = 64: always on is the best fixed N
    rows = [row(name, 0, 80, segments=tokens) for name, tokens in segments.items()]
    assert "(N ≥ 64, always on) | 0.919× |" in summary_markdown(rows)  # 73.5 / ((40 + 100 + 20 + 160) / 4)


def design_file(tmp_path: Path) -> Path:
    path = tmp_path / "design.json"
    path.write_text(json.dumps(DESIGN.summary()))
    return path


def test_dry_run_prints_each_configurations_server(tmp_path: Path, capsys):
    code = shift.main(["--model-path", "T", "--draft-model-path", "D", "--design", str(design_file(tmp_path)),
                       "--thresholds", "4,16", "--run-dir", str(tmp_path / "run-shift"), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    launches = [line for line in out.splitlines() if "sglang.launch_server" in line]
    assert len(launches) == 6  # plain, spec, gate-4, gate-16, gate-auto, upstream-adaptive
    assert sum("--speculative-disable-batch-threshold auto" in line for line in launches) == 1
    assert sum(line.endswith("--speculative-adaptive") for line in launches) == 1
    assert "--max-running-requests 64" in launches[0]  # the largest default level
    assert not (tmp_path / "run-shift").exists()


def test_upstream_as_shipped_starts_upstreams_server_without_the_plugin(tmp_path: Path, capsys):
    code = shift.main(["--model-path", "T", "--draft-model-path", "D", "--design", str(design_file(tmp_path)),
                       "--configs", "gate-auto,upstream-adaptive", "--upstream-as-shipped",
                       "--run-dir", str(tmp_path / "run-shift"), "--dry-run"])
    launches = [line for line in capsys.readouterr().out.splitlines() if "sglang.launch_server" in line]
    assert code == 0 and len(launches) == 2
    # SGLang then loads no plugin (test_plugin.py: the flag is unknown to such a server).
    assert not launches[0].startswith("env ")
    assert launches[1].startswith("env SGLANG_PLUGINS=none ") and launches[1].endswith("--speculative-adaptive")


def test_upstream_adaptive_can_run_its_own_draft_steps(tmp_path: Path, capsys):
    # Upstream's default slots reach 7 draft steps; on 0.5.17 a server of fewer crashes at start.
    code = shift.main(["--model-path", "T", "--draft-model-path", "D", "--design", str(design_file(tmp_path)),
                       "--configs", "gate-auto,upstream-adaptive", "--upstream-adaptive-steps", "7",
                       "--run-dir", str(tmp_path / "run-shift"), "--dry-run"])
    launches = [line for line in capsys.readouterr().out.splitlines() if "sglang.launch_server" in line]
    assert code == 0
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in launches[0]
    assert "--speculative-num-steps 7 --speculative-eagle-topk 1 --speculative-num-draft-tokens 8" in launches[1]


@pytest.mark.parametrize("steps", ["0", "-1", "x"])
def test_upstream_adaptive_steps_must_be_positive(tmp_path: Path, capsys, steps):
    with pytest.raises(SystemExit) as exit_info:
        shift.parse_args(["--model-path", "T", "--draft-model-path", "D", "--design", str(design_file(tmp_path)),
                          "--upstream-adaptive-steps", steps])
    assert exit_info.value.code == 2
    assert "--upstream-adaptive-steps" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--thresholds", ""], "--thresholds"),
    (["--configs", "plain,fast"], "--configs: choose from"),
    (["--run-dir", "elsewhere"], "must contain 'shift'"),
    (["--concurrency", "0,4"], "concurrency levels must be >= 1"),
])
def test_bad_arguments_are_usage_errors(tmp_path: Path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        shift.parse_args(["--model-path", "T", "--draft-model-path", "D", "--design", str(design_file(tmp_path)),
                          "--configs", "plain,gate", "--thresholds", "4", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_a_design_without_its_pair_is_a_usage_error(tmp_path: Path, capsys):
    with pytest.raises(SystemExit):
        shift.parse_args(["--model-path", "T", "--design", str(tmp_path / "missing.json"), "--configs", "plain"])
    assert "--design" in capsys.readouterr().err


class DesignServer(ThreadingHTTPServer):
    """A stand-in SGLang on a socket: /generate answers the design's continuation, /server_info
    a gate whose counters move with each request."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), DesignHandler)
        self.served = 0


class DesignHandler(JSONHandler):
    def do_GET(self) -> None:  # /server_info
        served = self.server.served
        self.reply({"internal_states": [{"spec_gate": {"decode_steps_spec": served, "decode_steps_plain": 2 * served,
                                                       "switches": served // 2}}]})

    def do_POST(self) -> None:  # /generate
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.served += 1
        self.reply({"output_ids": DESIGN.continuation(body["input_ids"][-1],
                                                      body["sampling_params"]["max_new_tokens"])})


def test_a_round_against_a_server_writes_its_row_and_the_summary(tmp_path: Path):
    from benchmark.servers.config import ServerConfig
    from benchmark.servers.record import Run

    with serving(DesignServer()) as fake:
        args = shift.parse_args(["--model-path", "T", "--design", str(design_file(tmp_path)), "--configs", "plain",
                                 "--phases", "2", "--phase-s", "0.2", "--concurrency", "2", "--concurrency-s", "0.2",
                                 "--output-len", "8", "--port", str(fake.server_address[1]),
                                 "--run-dir", str(tmp_path / "shift")])
        run = Run(args)
        run.dir.mkdir()
        shift.serve_schedule(run, ServerConfig("gate-auto", ()), 0)
    (row,) = [json.loads(line) for line in (run.dir / "shift.jsonl").read_text().splitlines()]
    assert row["config"] == "gate-auto" and row["requests"] == fake.served > 0
    assert row["mismatched"] == row["errors"] == 0 and not run.failures
    assert row["gate_delta"] == {"decode_steps_spec": fake.served, "decode_steps_plain": 2 * fake.served,
                                 "switches": fake.served // 2}
    assert "| gate-auto |" in summary_markdown([row])
