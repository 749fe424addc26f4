"""CPU tests of the benchmark suite: prompt generator, sweep commands, report, find_threshold.

Nothing here starts a server. The report fixtures are shaped like the rows that
``sglang.benchmark.serving`` 0.5.17 appends to ``--output-file``; one test checks that shape
against the installed client's source so the fixtures cannot drift from it.
"""

from __future__ import annotations

import collections
import gzip
import importlib.util
import json
import math
import re
import shutil
import statistics
import sys
import threading
import urllib.error
from contextlib import contextmanager
from typing import Callable, Optional
from pathlib import Path

import pytest

from benchmark.analysis import (auto_verdict, cpu_profile, decode_log, find_threshold, kernel_profile,
                                report, sweep_results, sweep_tables, trace_events, ttft_stages)
from benchmark.client import (commands, levels, output_spread, profiles, prompts, serving_session,
                              sweep, ttft_probe)
from benchmark.client.bursty import Phase, bursty_slices, compact_details, parse_phases
from benchmark.client.dataset import prepare_dataset
from benchmark.pairs import model_pair
from benchmark.servers import config, endpoints, machine, processes, record

BENCH = Path(__file__).resolve().parents[1] / "benchmark"

# --------------------------------------------------------------------------- prompts

MODULE = '''"""A module."""
import os

CONSTANT = 3


def add(a: int, b: int = 2) -> int:
    """Add two numbers."""
    total = a + b
    if total > 100:
        total = 100
    return total


class Store:
    def get(self, key: str, default=None):
        """Return the value stored under key."""
        value = self.data.get(key)
        if value is None:
            value = default
        return value

    def undocumented(self):
        x = 1
        y = 2
        return x + y

    def star(self, *args):
        """Takes anything."""
        a = args
        b = a
        return b
'''


@pytest.fixture()
def sources(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    for i in range(4):
        pkg = root / f"pkg{i}"
        pkg.mkdir(parents=True)
        (pkg / "mod.py").write_text(MODULE.replace("add", f"add{i}").replace("Store", f"Store{i}"))
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text(MODULE)  # excluded directory
    return root


def test_functions_are_split_into_header_and_body(sources: Path) -> None:
    fns = prompts.functions_in(sources, sources / "pkg0" / "mod.py")
    by_name = {f.source.split(":")[1]: f for f in fns}
    assert set(by_name) == {"add0", "Store0.get", "Store0.star"}  # documented ones only
    get = by_name["Store0.get"]
    assert get.header.startswith("def get(self, key: str, default=None):")
    assert get.header.rstrip().endswith('"""Return the value stored under key."""')
    assert get.body.startswith("    value = self.data.get(key)")  # dedented to the def
    assert "CONSTANT = 3" in by_name["add0"].context
    assert [(p.name, p.json_type, p.required) for p in by_name["add0"].params] == [
        ("a", "integer", True), ("b", "integer", False)]
    assert by_name["Store0.star"].params == ()  # *args: no fixed schema


def test_generate_is_deterministic_and_well_formed(sources: Path) -> None:
    rows = prompts.generate(8, seed=3, tool_fraction=0.5, sources=[sources])
    assert rows == prompts.generate(8, seed=3, tool_fraction=0.5, sources=[sources])
    assert rows != prompts.generate(8, seed=4, tool_fraction=0.5, sources=[sources])
    assert sorted(r["kind"] for r in rows) == ["complete"] * 4 + ["tool"] * 4
    assert not any("tests/" in r["source"] for r in rows)
    for r in rows:
        user, assistant = r["conversations"]
        assert (user["role"], assistant["role"]) == ("user", "assistant")
        assert user["content"] and assistant["content"]
        if r["kind"] == "tool":
            call = json.loads(assistant["content"])
            assert f'"name": "{call["name"]}"' in user["content"]  # one of the offered tools
    completions = [r for r in rows if r["kind"] == "complete"]
    assert len({r["source"] for r in completions}) == len(completions)  # no repeated prompt


def test_generate_refuses_more_rows_than_functions(sources: Path) -> None:
    with pytest.raises(ValueError, match="distinct functions"):
        prompts.generate(100, tool_fraction=0.0, sources=[sources])


def test_default_sources_give_enough_prompts() -> None:
    rows = prompts.generate(64, seed=0)
    assert len(rows) == 64 and {r["kind"] for r in rows} == {"complete", "tool"}


def test_sglang_custom_loader_accepts_the_file(sources: Path, tmp_path: Path) -> None:
    from sglang.benchmark.datasets import custom

    rows = prompts.generate(8, seed=0, tool_fraction=0.5, sources=[sources])
    path = tmp_path / "p.jsonl"
    digest = prompts.write_jsonl(rows, path)
    assert len(digest) == 64

    class WhitespaceTokenizer:  # the loader only calls encode() unless a chat template is asked
        def encode(self, text: str) -> list[str]:
            return text.split()

    loaded = custom.sample_custom_requests(str(path), 8, WhitespaceTokenizer(), fixed_output_len=64)
    assert len(loaded) == 8
    assert {row.output_len for row in loaded} == {64}
    assert {row.prompt for row in loaded} == {r["conversations"][0]["content"] for r in rows}


# --------------------------------------------------------------------------- sweep


def sweep_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--model-path", "/m/target", "--draft-model-path", "/m/draft",
            "--draft-load-format", "dummy", "--run-dir", str(tmp_path / "run"), *extra]


def test_server_configs_and_commands(tmp_path: Path) -> None:
    args = sweep.parse_args(sweep_args(
        tmp_path, "--thresholds", "8,16", "--concurrency", "1,4,64", "--",
        "--load-format", "dummy", "--attention-backend", "triton"))
    spec = config.Speculation("EAGLE3", "/m/draft", 3, "dummy")
    configs = config.server_configs(args.configs, args.thresholds, spec, args.run_dir)
    assert [c.name for c in configs] == [
        "plain", "spec", "upstream-gate-8", "upstream-gate-16", "gate-8", "gate-16"]
    by_name = {c.name: c for c in configs}
    assert by_name["plain"].flags == ()
    assert by_name["upstream-gate-8"].adaptive_config == {
        "1": {"candidate_steps": [3]}, "9": {"candidate_steps": [0]}}

    cmd = config.server_command(args, by_name["gate-16"])
    assert cmd[1:3] == ["-m", "sglang.launch_server"]
    joined = " ".join(cmd)
    assert "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in joined
    assert "--speculative-disable-batch-threshold 16" in joined
    assert "--max-running-requests 64 --cuda-graph-max-bs 64" in joined  # largest C
    assert cmd[-4:] == ["--load-format", "dummy", "--attention-backend", "triton"]
    upstream = config.server_command(args, by_name["upstream-gate-8"])
    assert upstream[upstream.index("--speculative-adaptive-config") + 1] == str(
        args.run_dir / "upstream-gate-8.json")
    assert "--speculative-draft-load-format" not in config.server_command(args, by_name["plain"])


def test_upstream_as_shipped_unloads_the_plugin_for_upstreams_configurations_only(tmp_path: Path) -> None:
    args = sweep.parse_args(sweep_args(tmp_path, "--configs", "plain,upstream-gate,gate", "--thresholds", "8",
                                       "--upstream-as-shipped"))
    configs = config.server_configs(args.configs, args.thresholds, config.Speculation.from_args(args),
                                    args.run_dir, config.UpstreamOptions.from_args(args))
    assert [c.env for c in configs] == [(), (("SGLANG_PLUGINS", "none"),), ()]
    assert config.server_command(args, configs[1])[:3] == ["env", "SGLANG_PLUGINS=none", sys.executable]
    assert config.server_command(args, configs[2])[0] == sys.executable


def test_tree_drafting_reaches_every_speculative_server(tmp_path: Path) -> None:
    args = sweep.parse_args(sweep_args(tmp_path, "--configs", "plain,spec,gate,gate-auto", "--thresholds", "8",
                                       "--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                                       "--speculative-num-draft-tokens", "8"))
    configs = config.server_configs(args.configs, args.thresholds, config.Speculation.from_args(args), args.run_dir)
    tree = "--speculative-num-steps 5 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8"
    assert [tree in " ".join(config.server_command(args, c)) for c in configs] == [False, True, True, True]


@pytest.mark.parametrize("bad, error", [
    (["--configs", "plain,spec", "--speculative-eagle-topk", "4"], "give its size, --speculative-num-draft-tokens D"),
    (["--configs", "spec,upstream-gate", "--thresholds", "8", "--speculative-eagle-topk", "4",
      "--speculative-num-draft-tokens", "8"], "upstream-gate: upstream's --speculative-adaptive turns itself off"),
])
def test_a_tree_the_sweep_cannot_measure_is_refused(tmp_path: Path, capsys, bad: list[str], error: str) -> None:
    with pytest.raises(SystemExit):
        sweep.parse_args(sweep_args(tmp_path, *bad))
    assert error in capsys.readouterr().err


def test_the_setup_line_names_a_tree() -> None:
    info = {"model_path": "t", "speculative_draft_model_path": "d", "speculative_algorithm": "EAGLE3",
            "speculative_num_steps": 5, "speculative_eagle_topk": 4, "speculative_num_draft_tokens": 8,
            "max_running_requests": 128, "version": "0.5.17"}
    row = {"server_info": info, "sharegpt_output_len": 256}
    line = sweep_tables.setup_line(sweep_results.Results(closed={"spec": {1: row}}))
    assert "5 draft steps of a tree (topk 4, 8 draft tokens), output 256 tokens per request" in line
    chain = {**info, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 6}
    assert "5 draft steps, output" in sweep_tables.setup_line(
        sweep_results.Results(closed={"spec": {1: {**row, "server_info": chain}}}))


def test_bench_command(tmp_path: Path) -> None:
    args = sweep.parse_args(sweep_args(tmp_path, "--output-len", "128"))
    closed = commands.bench_command(args, url=config.base_url(args), tag="spec,c=8", dataset=Path("d.jsonl"),
                                 output_file=Path("raw.jsonl"), num_prompts=64, warmup=8,
                                 concurrency=8, flush_cache=True)
    assert closed[1:3] == ["-m", "sglang.benchmark.serving"]
    def value(flag: str) -> str:
        return closed[closed.index(flag) + 1]

    assert value("--base-url") == "http://127.0.0.1:30000"
    assert value("--dataset-name") == "custom" and value("--dataset-path") == "d.jsonl"
    assert value("--request-rate") == "inf" and value("--max-concurrency") == "8"
    assert value("--sharegpt-output-len") == "128" and value("--tag") == "spec,c=8"
    assert "--flush-cache" in closed and "--output-details" not in closed
    phase = commands.bench_command(args, url="http://h:1", tag="t", dataset=Path("d"), output_file=Path("o"),
                                num_prompts=10, warmup=0, rate=2.5, details=True)
    assert "--max-concurrency" not in phase and "--output-details" in phase
    assert phase[phase.index("--request-rate") + 1] == "2.5"
    mixed = commands.bench_command(sweep.parse_args(sweep_args(tmp_path, "--output-len", "0")), url="http://h:1", tag="t",
                                dataset=Path("d"), output_file=Path("o"), num_prompts=10, warmup=0)
    assert "--sharegpt-output-len" not in mixed  # the loader takes each answer's length


LOADER_FLOOR = "give 0 (each prompt's answer length) or at least 4 tokens"
SPREAD_RANGE = "give a fraction of --output-len from 0"


@pytest.mark.parametrize("argv, advice", [
    *((["--output-len", value], LOADER_FLOOR) for value in ("2", "-8", "many")),
    *((["--output-len-spread", value], SPREAD_RANGE) for value in ("1", "1.5", "-0.1", "wide")),
    (["--output-len", "0", "--output-len-spread", "0.5"],
     "--output-len-spread spreads lengths around --output-len"),  # nothing to spread
])
def test_a_bad_output_length_stops_the_sweep_naming_its_flag(tmp_path: Path, capsys, argv, advice) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sweep.parse_args(sweep_args(tmp_path, *argv))
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert argv[-2] in error and advice in error


def test_spread_lengths_are_uniform_around_the_mean() -> None:
    lengths = output_spread.spread_lengths(4000, 256, 0.5, seed=0)
    assert lengths == output_spread.spread_lengths(4000, 256, 0.5, seed=0)
    assert (min(lengths), max(lengths)) == output_spread.length_range(256, 0.5) == (128, 384)
    assert abs(statistics.mean(lengths) - 256) < 4
    assert output_spread.spread_lengths(3, 256, 0.0, seed=0) == [256, 256, 256]
    assert output_spread.length_range(6, 0.9) == (4, 11)  # never under the sweep's floor


@pytest.fixture(scope="module")
def pair_tokenizer(tmp_path_factory) -> str:
    """The generated models' tokenizer (model_pair.py), the one the benchmarks count with."""
    path = tmp_path_factory.mktemp("tokenizer")
    model_pair.write_tokenizer(str(path))
    return str(path)


def test_answers_are_cut_to_exactly_the_drawn_token_count(pair_tokenizer: str) -> None:
    from sglang.benchmark.utils import get_tokenizer

    tokenizer = get_tokenizer(pair_tokenizer)
    for answer in ('    return {"key": value}  # done', "x", "déjà vu → λ"):
        for length in range(4, 90):
            text = output_spread.answer_of_length(tokenizer, answer, length)
            assert len(tokenizer.encode(text)) == length, (answer, length)


def spread_run(tmp_path: Path, sources: Path, model_path: str, *extra: str) -> "record.Run":
    """A closed-loop sweep of 16 prompts from ``sources``, its directories made as main() does."""
    run = record.Run(sweep.parse_args([
        "--model-path", model_path, "--configs", "plain", "--scenarios", "closed",
        "--run-dir", str(tmp_path / "run"), "--concurrency", "2", "--min-prompts", "16",
        "--rows", "16", "--tool-fraction", "0.5", "--source", str(sources), *extra]))
    for d in (run.logs, run.work):
        d.mkdir(parents=True, exist_ok=True)
    return run


def test_a_tokenizer_the_answers_cannot_be_cut_for_stops_the_sweep(tmp_path: Path, sources: Path,
                                                                    monkeypatch) -> None:
    # A stand-in: every real tokenizer tried settles (the test above); this one never encodes
    # to the length asked, as an exotic one might.
    class Stubborn:
        def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
            return [0] * (len(text) * 2 + 1)

        def decode(self, ids: list[int]) -> str:
            return "a" * len(ids)

    import sglang.benchmark.utils

    monkeypatch.setattr(sglang.benchmark.utils, "get_tokenizer", lambda path: Stubborn())
    run = spread_run(tmp_path, sources, "/m/t", "--output-len-spread", "0.5")
    with pytest.raises(SystemExit, match="--output-len-spread: no cut of the answer encodes to"):
        prepare_dataset(run)


def test_sglangs_loader_reads_the_drawn_lengths_from_the_spread_dataset(
        tmp_path: Path, sources: Path, pair_tokenizer: str) -> None:
    from sglang.benchmark.datasets import custom
    from sglang.benchmark.utils import get_tokenizer

    run = spread_run(tmp_path, sources, pair_tokenizer, "--output-len", "64", "--output-len-spread", "0.5")
    args = run.args
    dataset = prepare_dataset(run)
    loaded = custom.sample_custom_requests(str(dataset), 16, get_tokenizer(pair_tokenizer))
    drawn = output_spread.spread_lengths(16, 64, 0.5, seed=args.prompt_seed)
    assert sorted(row.output_len for row in loaded) == sorted(drawn)
    assert "each answer cut to 32-96 tokens" in (run.dir / "command.txt").read_text()
    # Levels take each answer's length; a profile's requests keep theirs fixed.
    level = levels.level_command(run, config.ServerConfig("plain", ()), 2, dataset)
    assert "--sharegpt-output-len" not in level
    assert "--sharegpt-output-len 2048" in " ".join(
        profiles.profile_load_command(run, config.ServerConfig("plain", ()), dataset, "profile", 2048))


def test_phases_prompts_and_slices(tmp_path: Path) -> None:
    phases = parse_phases("2:60,32:30.5")
    assert phases == [Phase(2, 60), Phase(32, 30.5)]
    assert [p.num_prompts for p in phases] == [120, 976]
    assert parse_phases("") == []
    assert commands.level_prompts(1, 8, 32) == 32 and commands.level_prompts(64, 8, 32) == 512

    dataset = tmp_path / "d.jsonl"
    dataset.write_text("".join(f'{{"i": {i}}}\n' for i in range(10)))
    paths = bursty_slices(dataset, [Phase(1, 3), Phase(2, 2)], tmp_path, True)
    assert [p.read_text().splitlines() for p in paths] == [
        ['{"i": 0}', '{"i": 1}', '{"i": 2}'], ['{"i": 3}', '{"i": 4}', '{"i": 5}', '{"i": 6}']]


def test_compact_details_keeps_each_requests_decode_time() -> None:
    row = {"tag": "t", "ttfts": [0.1, 0.2], "itls": [[0.01, 0.02], [0.03]],
           "generated_texts": ["ab", "c"], "output_lens": [3, 2]}
    assert compact_details(row) == {"tag": "t", "ttfts": [0.1, 0.2], "output_lens": [3, 2],
                                          "decode_s": [pytest.approx(0.03), 0.03]}
    assert "itls" in row  # the input is left alone


def test_gate_delta() -> None:
    before = {"active": True, "decode_steps_spec": 10, "decode_steps_plain": 5, "switches": 2}
    after = {"active": False, "decode_steps_spec": 15, "decode_steps_plain": 50, "switches": 3}
    assert endpoints.gate_delta(before, after) == {
        "decode_steps_spec": 5, "decode_steps_plain": 45, "switches": 1}
    assert endpoints.gate_delta(None, None) is None
    before["host_seq_lens"] = {"resolved_on_host": 4, "copied_back": 10, "disagreed": 0, "stood_down": False}
    after["host_seq_lens"] = {"resolved_on_host": 44, "copied_back": 15, "disagreed": 0, "stood_down": False}
    assert endpoints.gate_delta(before, after)["host_seq_lens"] == {
        "resolved_on_host": 40, "copied_back": 5, "disagreed": 0}


def test_dry_run_prints_every_command(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = sweep.main(sweep_args(tmp_path, "--configs", "plain,gate", "--thresholds", "4",
                                 "--concurrency", "1,4", "--bursty-phases", "1:10,8:10",
                                 "--rows", "200", "--dry-run"))
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("sglang.launch_server") == 2
    # per server: 2 closed-loop levels and 2 bursty phases
    assert out.count("sglang.benchmark.serving") == 2 * (2 + 2)
    assert "--tag gate-4,c=4" in out and "--tag gate-4,bursty,phase=1,rate=8,s=10" in out
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_profile_runs_last_with_long_requests(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "plain", "--concurrency", "4",
                          "--scenarios", "closed", "--profile-concurrency", "64", "--dry-run"))
    bench = [line for line in capsys.readouterr().out.splitlines() if "sglang.benchmark.serving" in line]
    assert "--tag plain,c=4" in bench[0]
    assert "--tag plain,profile" in bench[1]
    assert "--num-prompts 64 " in bench[1] and "--max-concurrency 64" in bench[1]
    assert "--sharegpt-output-len 2048 " in bench[1]
    # the server must admit the profiled batch, above the largest closed-loop level
    args = sweep.parse_args(sweep_args(tmp_path, "--concurrency", "4", "--profile-concurrency", "64"))
    assert args.max_running_requests == 64


def test_prefill_profile_is_a_wave_of_short_requests(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "plain", "--concurrency", "4", "--scenarios",
                          "closed", "--profile-concurrency", "64", "--profile-prefill", "--dry-run"))
    bench = [line for line in capsys.readouterr().out.splitlines() if "sglang.benchmark.serving" in line]
    assert [line.split("--tag ")[1].split()[0] for line in bench] == [
        "plain,c=4", "plain,profile-prefill", "plain,profile"]
    assert "--num-prompts 64 " in bench[1] and "--max-concurrency 64" in bench[1]
    assert "--sharegpt-output-len 4 " in bench[1] and "--warmup-requests 0 " in bench[1]
    with pytest.raises(SystemExit):
        sweep.parse_args(sweep_args(tmp_path, "--profile-prefill"))


def test_bursty_alone_warms_up_first(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "spec", "--scenarios", "bursty",
                          "--bursty-phases", "1:10", "--rows", "200", "--dry-run"))
    tags = [line.split("--tag ")[1].split()[0] for line in capsys.readouterr().out.splitlines()
            if "--tag " in line]
    assert tags == ["spec,warmup", "spec,bursty,phase=0,rate=1,s=10"]


def test_sweep_refuses_a_dataset_too_small(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="needs"):
        sweep.main(sweep_args(tmp_path, "--rows", "10", "--dry-run"))


@pytest.mark.parametrize("bad", [["--configs", "plain,eagle"], ["--thresholds", "0"],
                                 ["--thresholds", "8,x"], ["--repeat-levels", "0"],
                                 ["--scenarios", "open"]])
def test_sweep_rejects_bad_options(tmp_path: Path, bad: list[str]) -> None:
    with pytest.raises(SystemExit):
        sweep.parse_args(sweep_args(tmp_path, *bad))


# --------------------------------------------------------------------------- report fixtures


def serving_row(tag: str, concurrency: int | None, tput: float, *,
                accept: float | None = None, spec: bool = False,
                details: dict | None = None, ttft_ms: float = 50.0) -> dict:
    """A row as sglang.benchmark.serving writes it (metric values made up)."""
    tpot = 1000 * (concurrency or 1) / tput
    row = {
        "tag": tag, "backend": "sglang", "dataset_name": "custom", "request_rate": float("inf"),
        "max_concurrency": concurrency, "sharegpt_output_len": 256, "random_input_len": 1024,
        "random_output_len": 1024, "random_range_ratio": 0.0,
        "server_info": {
            "model_path": "/tmp/models/target", "version": "0.5.17", "max_running_requests": 128,
            "speculative_algorithm": "EAGLE3" if spec else None,
            "speculative_draft_model_path": "/tmp/models/draft" if spec else None,
            "speculative_num_steps": 3 if spec else None,
            "internal_states": [{"avg_spec_accept_length": accept}],
        },
        "duration": 10.0, "completed": 8 * (concurrency or 1), "total_input_tokens": 4000,
        "total_input_text_tokens": 4000, "total_input_vision_tokens": 0,
        "total_output_tokens": 2048, "total_output_tokens_retokenized": 2048,
        "request_throughput": 1.0, "input_throughput": 400.0, "output_throughput": tput,
        "total_throughput": tput + 400.0, "concurrency": (concurrency or 1) * 0.95,
        "accept_length": accept, "max_output_tokens_per_s": tput * 1.2,
        "max_concurrent_requests": concurrency or 1,
    }
    for metric, base in (("e2e_latency", 256 * tpot), ("ttft", ttft_ms), ("tpot", tpot),
                         ("itl", tpot)):
        for stat, factor in (("mean", 1.0), ("median", 1.0), ("std", 0.1), ("p90", 1.5),
                             ("p95", 1.7), ("p99", 2.0)):
            row[f"{stat}_{metric}_ms"] = base * factor
    return row | (details or {})


def details(ttfts_s: list[float], tpots_s: list[float], out_len: int = 5,
            errors: list[str] | None = None) -> dict:
    """The per-request lists that ``--output-details`` adds to a row."""
    return {
        "input_lens": [100] * len(ttfts_s),
        "output_lens": [out_len if not e else 0 for e in (errors or [""] * len(ttfts_s))],
        "ttfts": ttfts_s,
        "itls": [[t] * (out_len - 1) for t in tpots_s],
        "generated_texts": ["x"] * len(ttfts_s),
        "errors": errors or [""] * len(ttfts_s),
    }


PLAIN = {1: 200.0, 2: 390.0, 4: 760.0, 8: 1500.0, 16: 2600.0}
SPEC = {1: 400.0, 2: 700.0, 4: 1000.0, 8: 1200.0, 16: 1300.0}
GATE = {1: 390.0, 2: 690.0, 4: 990.0, 8: 1480.0, 16: 2550.0}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "2026-11-30-fixture"
    run.mkdir()
    raw = [serving_row(f"plain,c={c}", c, t) for c, t in PLAIN.items()]
    raw += [serving_row(f"spec,c={c}", c, t, accept=2.5, spec=True) for c, t in SPEC.items()]
    raw += [serving_row(f"gate-4,c={c}", c, t, accept=2.0, spec=True, ttft_ms=60.0)
            for c, t in GATE.items()]
    raw.append(serving_row("plain,c=16", 16, 2700.0))  # a rerun: the later row wins
    write_jsonl(run / "raw.jsonl", raw)
    write_jsonl(run / "gate.jsonl", [
        {"tag": f"gate-4,c={c}", "config": "gate-4", "max_concurrency": c,
         "before": {}, "after": {},
         "delta": {"decode_steps_spec": 100 if c <= 4 else 3, "decode_steps_plain":
                   0 if c <= 4 else 97, "switches": 0 if c <= 4 else 2,
                   **({"host_seq_lens": {"resolved_on_host": 97, "copied_back": 3, "disagreed": 0}}
                      if c == 16 else {})},
         "steady_decode": {"lines": 9, "median_tok_s": 2880.0,
                           "decode_only": {"lines": 5, "median_tok_s": 2910.0},
                           "prefill_cost": {"intervals": 9, "step_ms": 5.8, "per_prefill_ms": 18.49}}
         if c == 16 else None,
         "prefills": {"batches": 12, "requests": 80, "tokens": 40000} if c == 16 else None,
         "ttft_stages": {"queue": 12.0, "prefill": 45.0, "ttft": 60.0} if c == 16 else None,
         "cpu_busy": {"tokenizer": 0.9, "scheduler": 0.75, "detokenizer": 0.3} if c == 16 else {},
         "cpu_machine": {"cores_busy": 5.5, "steal_pct": 0.0, "scheduler_rest": 0.2} if c == 16 else {},
         "cpu_placement": {"scheduler_cpus": 2, "sibling_busy": 0.6, "numa_nodes": 1} if c == 16 else {},
         "ttft_split": {"probes": 9, "tokenize": 2.0, "to_scheduler": 150.0, "queue": 10.0,
                        "prefill": 40.0, "back": 30.0} if c == 16 else None}
        for c in GATE
    ] + [{"tag": "plain,c=16", "config": "plain", "max_concurrency": 16, "before": None,
          "after": None, "delta": None,  # a run from before decode_only was measured:
          "steady_decode": {"lines": 9, "median_tok_s": 3000.0,
                            "prefill_cost": {"intervals": 9, "step_ms": 5.663, "per_prefill_ms": 16.54}},
          "prefills": {"batches": 9, "requests": 80, "tokens": 40000},
          "ttft_stages": {"queue": 12.0, "prefill": 30.0, "ttft": None},
          "cpu_busy": {"tokenizer": 0.45, "scheduler": 0.75},
          "cpu_machine": {"cores_busy": 5.0, "steal_pct": 1.5, "scheduler_rest": 0.1},
          "cpu_placement": {"scheduler_cpus": 1, "numa_nodes": 1},  # no SMT sibling
          "ttft_split": {"probes": 9, "tokenize": 2.0, "to_scheduler": 50.0, "queue": 10.0,
                         "prefill": 40.0, "back": 30.0}}
    ] + [{"tag": "gate-4,bursty", "config": "gate-4", "scenario": "bursty", "before": {},
          "after": {}, "delta": {"decode_steps_spec": 50, "decode_steps_plain": 60,
                                 "switches": 4}}])
    bursty = []
    for name, tpot in (("spec", 0.030), ("gate-4", 0.010)):
        bursty.append(serving_row(f"{name},bursty,phase=0,rate=2,s=10", None, 100.0, spec=True,
                                  details=details([0.1, 0.2], [0.005, 0.005])))
        bursty.append(serving_row(
            f"{name},bursty,phase=1,rate=8,s=10", None, 100.0, spec=True,
            details=details([0.5, 3.0, 0.4], [tpot, tpot, tpot], errors=["", "", "boom"])))
    write_jsonl(run / "bursty.jsonl", [compact_details(r) for r in bursty])
    return run


def test_fixture_rows_have_the_keys_serving_writes() -> None:
    source = Path(importlib.util.find_spec("sglang.benchmark.serving").origin).read_text()
    block = source[source.index("        result = {"):]
    block = block[:block.index("\n        }\n")]
    written = set(re.findall(r'^\s+"(\w+)":', block, re.MULTILINE))
    detail_block = source[source.index("    result_details = {"):]
    detail_block = detail_block[:detail_block.index("\n    }\n")]
    written_details = set(re.findall(r'^\s+"(\w+)":', detail_block, re.MULTILINE))
    row = serving_row("t", 1, 1.0)
    assert written == set(row), "serving.py's result keys changed: update the fixture"
    assert written_details == set(details([0.1], [0.01]))


# --------------------------------------------------------------------------- report


def test_report_tables(run_dir: Path) -> None:
    res = sweep_results.load([run_dir])
    assert list(res.closed) == ["plain", "spec", "gate-4"]
    assert res.closed["plain"][16]["output_throughput"] == 2700.0
    assert res.envelope() == {1: 400.0, 2: 700.0, 4: 1000.0, 8: 1500.0, 16: 2700.0}
    text = report.markdown(res, [run_dir.name], 1000, 20, plot=None)
    assert "| gate-4 | 16 | 2,550.0 |" in text
    assert "| 16 | 2,700.0 | 1,300.0 | 2,700.0 | 2,550.0 (0.94×) |" in text
    assert "| 3 / 97 | 2 |" in text  # gate steps and switches from gate.jsonl
    assert "target `/tmp/models/target`, draft `/tmp/models/draft`, 3 draft steps" in text
    # gated / plain: 2550 / 2700 tok/s; TPOT 1000*16/2550 over 1000*16/2700
    # steady decode 2880 / 3000; decode only: plain's not measured; mean TTFT 60 / 50
    assert "| gate-4 | 16 | 0.944 | 1.059 | 0.960 | – | 1.200 | 12 / 9 | 5.80, 18.5 / 5.66, 16.5 |" in text
    assert "| gate-4 | 8 | 0.987 | 1.014 | – | – | 1.200 | – | – |" in text  # no steady-state lines recorded
    assert "## Host sequence lengths" in text and "| gate-4 | 16 | 97 | 3 | 0 |" in text


def test_report_shows_ttft_stages_against_plain(run_dir: Path) -> None:
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    assert "## Time to first token by stage, server side" in text
    assert "| plain | 16 | 12.0 | 30.0 | – |" in text
    # no ratio where plain observed nothing
    assert "| gate-4 | 16 | 12.0 (1.00×) | 45.0 (1.50×) | 60.0 |" in text


def test_report_shows_each_processs_busiest_thread_against_plain(run_dir: Path) -> None:
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    assert "## Busiest thread of each server process" in text
    assert "| plain | 16 | 0.45 | 0.75 | – |" in text  # a detokenizer that was not found
    assert "| gate-4 | 16 | 0.90 (2.00×) | 0.75 (1.00×) | 0.30 |" in text
    assert "| gate-4 | 8 |" not in text.split("## Busiest thread")[1]  # nothing read at C = 8


def test_report_shows_the_machines_cpu_against_plain(run_dir: Path) -> None:
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    section = text.split("## The machine's CPU over each level")[1]
    assert "| plain | 16 | 5.00 | 1.50 | 0.10 |" in section
    assert "| gate-4 | 16 | 5.50 (1.10×) | 0.00 | 0.20 (2.00×) |" in section  # no steal: no ratio


def test_report_balances_the_start_order_of_an_ab(tmp_path: Path) -> None:
    def sweep_dir(name: str, gate_tok_s: float, gate_tpot_ms: float) -> Path:
        run = tmp_path / name
        run.mkdir()
        rows = [serving_row("plain,c=128", 128, 1000.0) | {"median_tpot_ms": 10.0},
                serving_row("gate-9,c=128", 128, gate_tok_s) | {"median_tpot_ms": gate_tpot_ms},
                serving_row("gate-9,c=64", 64, 500.0)]  # no plain at C = 64: no ratio
        (run / "raw.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return run

    runs = [sweep_dir("plain-first-gate", 900.0, 11.0), sweep_dir("gate-first-plain", 1000.0, 10.0)]
    report.main(["--order-balanced", *map(str, runs), "--out", str(tmp_path)])
    text = (tmp_path / "order-balanced.md").read_text()
    assert "| config | C | tok/s vs plain, plain-first-gate · gate-first-plain | order-balanced |" in text
    assert "| gate-9 | 128 | 0.900 · 1.000 | 0.949 | 1.100 · 1.000 | 1.049 |" in text  # 0.9 ** 0.5, 1.1 ** 0.5
    assert "| gate-9 | 64 |" not in text
    one = sweep_tables.order_balanced_table({"only": sweep_results.load([runs[0]]), "missing": sweep_results.load([tmp_path / "none"])})
    assert "| gate-9 | 128 | 0.900 | – | 1.100 | – |" in one  # measured in one order only


def test_report_shows_where_each_scheduler_ran(run_dir: Path) -> None:
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    section = text.split("## Where each scheduler ran")[1]
    assert "| plain | 16 | 1.00 | – | 1.00 |" in section
    assert "| gate-4 | 16 | 2.00 (2.00×) | 0.60 | 1.00 (1.00×) |" in section


def test_report_shows_the_probes_ttft_split_against_plain(run_dir: Path) -> None:
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    section = text.split("## Time to first token across the server's processes")[1]
    assert "| plain | 16 | 2.0 | 50.0 | 10.0 | 40.0 | 30.0 |" in section
    assert "| gate-4 | 16 | 2.0 (1.00×) | 150.0 (3.00×) | 10.0 (1.00×) |" in section


def test_report_takes_a_repeated_level_by_its_median_run(tmp_path: Path) -> None:
    run = tmp_path / "repeats"
    run.mkdir()
    plain, gate = [8300.0, 7700.0, 8000.0], [7900.0, 7600.0, 8100.0, 7800.0]
    write_jsonl(run / "raw.jsonl", [serving_row(f"plain,c=128,rep={i}", 128, t) for i, t in enumerate(plain, 1)]
                + [serving_row(f"gate-9,c=128,rep={i}", 128, t, spec=True) for i, t in enumerate(gate, 1)])
    write_jsonl(run / "gate.jsonl", [
        {"tag": f"{name},c=128,rep={i}", "config": name, "max_concurrency": 128, "delta": None,
         "ttft_stages": {"queue": float(i), "prefill": 50.0, "ttft": 100.0}}
        for name, runs in (("plain", plain), ("gate-9", gate)) for i in range(1, len(runs) + 1)])
    res = sweep_results.load([run])
    assert res.closed["plain"][128]["tag"] == "plain,c=128,rep=3"  # 8,000 of 7,700 / 8,000 / 8,300
    assert res.closed["gate-9"][128]["tag"] == "gate-9,c=128,rep=4"  # the lower middle of four
    text = report.markdown(res, [run.name], 1000, 20, plot=None)
    assert "| plain | 128 | 8,300.0 · 7,700.0 · 8,000.0 | 8,000.0 | 7.8 % |" in text
    assert "| gate-9 | 128 | 7,900.0 · 7,600.0 · 8,100.0 · 7,800.0 | 7,800.0 | 6.6 % |" in text
    assert "| gate-9 | 128 | 0.975 |" in text  # median against median
    # run I against run I: 7,900 / 8,300, 7,600 / 7,700, 8,100 / 8,000; gate's fourth has no pair
    # ... and the median TPOT of each pair (here 1000 C / tok/s: 8,300 / 7,900, ...) with the
    # median of those, its median ITL (the same here) and its mean TTFT (50 ms in every run)
    assert ("| gate-9 | 128 | 0.952 · 0.987 · 1.012 | 0.987 | 0.952 | 1.012 | 1.051 · 1.013 · 0.988 "
            "| 1.013 | 1.051 · 1.013 · 0.988 | 1.000 · 1.000 · 1.000 |") in text
    # the TTFT stages of the reported runs only
    assert "| gate-9 | 128 | 4.0 (1.33×) |" in text and "| plain | 128 | 3.0 |" in text
    assert text.count("| 128 | 1.0") == 0


def auto_snapshot(steps: dict[int, int], probes: int, best: dict[int, int]) -> dict:
    """The keys of the auto gate's /server_info snapshot that its verdict reads."""
    return {"threshold": "auto", "decode_steps": {str(k): n for k, n in steps.items()},
            "probes": probes, "best_by_batch_size": {str(b): k for b, k in best.items()}}


def test_report_judges_the_auto_gate_at_each_c_by_its_median_runs(tmp_path: Path) -> None:
    run = tmp_path / "auto"
    run.mkdir()
    once = {"plain": {1: 200.0, 16: 2000.0, 64: 5000.0}, "spec": {1: 400.0, 16: 1800.0, 64: 3000.0},
            "gate-4": {1: 390.0, 16: 1950.0, 64: 4990.0}, "gate-16": {1: 395.0, 16: 2050.0, 64: 4900.0},
            "upstream-adaptive": {16: 1900.0}}
    auto = {1: [410.0, 380.0, 420.0], 16: [2200.0, 2150.0, 2180.0], 64: [4800.0, 4850.0, 4700.0]}
    write_jsonl(run / "raw.jsonl", [serving_row(f"{name},c={c}", c, t) for name, by_c in once.items()
                                    for c, t in by_c.items()]
                + [serving_row(f"gate-auto,c={c},rep={i}", c, t, spec=True)
                   for c, runs in auto.items() for i, t in enumerate(runs, 1)])
    best = {1: 3, 16: 1, 64: 0}
    write_jsonl(run / "gate.jsonl", [
        # C = 16's median run is its third (2,180 of 2,150 / 2,180 / 2,200); its first ran k = 3 only
        {"tag": "gate-auto,c=16,rep=1", "config": "gate-auto", "max_concurrency": 16,
         "before": auto_snapshot({0: 0, 1: 0, 3: 0}, 0, best),
         "after": auto_snapshot({0: 0, 1: 0, 3: 500}, 0, best)},
        {"tag": "gate-auto,c=16,rep=3", "config": "gate-auto", "max_concurrency": 16,
         "before": auto_snapshot({0: 100, 1: 50, 3: 10}, 5, best),
         "after": auto_snapshot({0: 120, 1: 950, 3: 40}, 12, best)},
        # a snapshot from before the gate's policy existed: no counters per k
        {"tag": "gate-auto,c=64,rep=1", "config": "gate-auto", "max_concurrency": 64,
         "before": {"threshold": "auto", "candidates": [0, 1, 3]}, "after": auto_snapshot({0: 9}, 0, best)}])
    text = report.markdown(sweep_results.load([run]), [run.name], 1000, 20, plot=None)
    section = text.split("## The auto gate")[1].split("\n## ")[0]
    assert ("| C | auto | plain | always-on | best fixed N | upstream adaptive | "
            "auto / max(plain, always-on, best N), ✓ ≥ 0.98 | auto / max(plain, always-on), ✓ ≥ 1.05 | "
            "k run (share of decode steps) | k best at batch C after |") in section
    # auto 410 (median of 380 / 410 / 420) against spec's 400: within 0.98, short of 1.05
    assert "| 1 | 410.0 | 200.0 | 400.0 | 395.0 (N = 16) | – | 1.025× ✓ | 1.025× | – | – |" in section
    # 2,180 / gate-16's 2,050 and / plain's 2,000; k over the level: 900, 30 and 20 of 950 steps
    assert ("| 16 | 2,180.0 | 2,000.0 | 1,800.0 | 2,050.0 (N = 16) | 1,900.0 | 1.063× ✓ | 1.090× ✓ "
            "| 1: 95 % · 3: 3 % · 0: 2 % (+7 probes) | 1 |") in section
    # no counters per k before the level: no k run; the k best after it stands
    assert "| 64 | 4,800.0 | 5,000.0 | 3,000.0 | 4,990.0 (N = 4) | – | 0.960× ✗ | 0.960× | – | 0 |" in section
    assert ("- ✗ auto ≥ 0.98× max(plain, always-on, best fixed N) not at every C: below it at "
            "C = 64 (0.960×).") in section
    assert "- ✓ auto ≥ 1.05× max(plain, always-on) at C = 16 (1.090×)." in section


def closed_rows(by_name: dict[str, dict[int, float]]) -> sweep_results.Results:
    """Results holding one closed level per configuration and C, of that output tok/s."""
    return sweep_results.Results(closed={
        name: {c: {"tag": f"{name},c={c}", "output_throughput": t} for c, t in by_c.items()}
        for name, by_c in by_name.items()})


def test_the_auto_verdict_says_where_it_could_not_compare_and_where_it_never_beat_both(run_dir: Path) -> None:
    res = closed_rows({"plain": {1: 100.0, 2: 200.0}, "spec": {1: 150.0, 2: 150.0},
                       "gate-auto": {1: 153.0, 2: 204.0, 4: 390.0}})
    levels = auto_verdict.auto_levels(res)
    assert [(level.c, level.best_n, level.adaptive, level.versus_best) for level in levels] == [
        (1, None, None, 153.0 / 150.0), (2, None, None, 204.0 / 200.0), (4, None, None, None)]
    assert auto_verdict.verdict_lines(levels) == [
        "auto ≥ 0.98× max(plain, always-on, best fixed N) at every C compared (1, 2). Not compared "
        "at C = 4: plain or always-on did not run there. No fixed N ran at those C.",
        "auto ≥ 1.05× max(plain, always-on) nowhere (at most 1.020× at C = 1).",
    ]
    res = closed_rows({"plain": {1: 100.0}, "spec": {1: 150.0}, "gate-2": {1: 160.0},
                       "gate-auto": {1: 157.0}})
    assert auto_verdict.verdict_lines(auto_verdict.auto_levels(res))[0] == (
        "✓ auto ≥ 0.98× max(plain, always-on, best fixed N) at every C (1).")  # 157 / 160
    # no auto rows: no section
    assert auto_verdict.auto_section(sweep_results.load([run_dir])) is None
    assert "## The auto gate" not in report.markdown(sweep_results.load([run_dir]), [run_dir.name],
                                                     1000, 20, plot=None)


def sglang_histograms(registry):
    """SGLang's TTFT-stage histograms under their names and labels
    (observability/metrics_collector.py), in a registry of their own."""
    from prometheus_client import Histogram
    labels = ["model_name", "engine_type"]
    return {
        "queue": Histogram("sglang:queue_time_seconds", "q", labels, registry=registry),
        "stage": Histogram("sglang:per_stage_req_latency_seconds", "s", [*labels, "stage"],
                           registry=registry),
        "ttft": Histogram("sglang:time_to_first_token_seconds", "t", labels, registry=registry),
    }


def test_ttft_stages_means_between_two_reads_of_the_metrics_page() -> None:
    from prometheus_client import CollectorRegistry, generate_latest
    registry = CollectorRegistry()
    hist = sglang_histograms(registry)
    model = {"model_name": "m", "engine_type": "unified"}

    def page() -> dict:
        return ttft_stages.totals(generate_latest(registry).decode())

    hist["queue"].labels(**model).observe(5.0)  # before the level: not counted
    before = page()
    for queue, prefill in ((0.010, 0.100), (0.030, 0.300)):
        hist["queue"].labels(**model).observe(queue)
        hist["stage"].labels(**model, stage="prefill_forward").observe(prefill)
        hist["stage"].labels(**model, stage="request_process").observe(9.0)  # another stage
    means = ttft_stages.mean_ms(before, page())
    assert means["queue"] == pytest.approx(20.0)
    assert means["prefill"] == pytest.approx(200.0)
    assert means["ttft"] is None  # nothing observed in the level


@pytest.mark.parametrize("flags", [["--ttft-stages"], ["--ttft-probe-interval", "2"]])
def test_ttft_stages_and_probes_turn_metrics_on_for_every_server(tmp_path: Path, flags: list[str],
                                                                 capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "plain,gate", "--thresholds", "4",
                          "--concurrency", "4", "--scenarios", "closed", *flags, "--dry-run"))
    servers = [line for line in capsys.readouterr().out.splitlines() if "sglang.launch_server" in line]
    assert len(servers) == 2 and all("--enable-metrics" in line for line in servers)


def test_a_negative_probe_interval_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sweep.parse_args(sweep_args(tmp_path, "--ttft-probe-interval", "-1"))
    assert exit_info.value.code == 2
    assert "--ttft-probe-interval must be >= 0 seconds, got -1.0" in capsys.readouterr().err


# The shape py-spy 0.4 writes with --threads --idle -f raw (seen on a live process).
PYSPY_RAW = """\
thread (7): MainThread;<module> (launch.py:3);event_loop (/x/scheduler.py:1700);run_batch (/x/scheduler.py:1204);forward (/x/worker.py:40) 6
thread (7): MainThread;<module> (launch.py:3);event_loop (/x/scheduler.py:1712);process_result (/x/scheduler.py:900) 3
thread (7): MainThread;<module> (launch.py:3);event_loop (/x/scheduler.py:1700) 1
thread (9): Thread-1 (watchdog);Thread._bootstrap (threading.py:1002);sleep (watchdog.py:12) 50
"""


def test_cpu_profile_shares_of_one_thread() -> None:
    shares = cpu_profile.shares(PYSPY_RAW)
    assert shares.samples == 10  # the watchdog thread is left out
    loop, run_batch = "event_loop (scheduler.py)", "run_batch (scheduler.py)"
    assert shares.percent(shares.inclusive, loop) == 100.0  # two lines of it count once
    assert shares.percent(shares.inclusive, run_batch) == 60.0
    assert shares.percent(shares.self_time, loop) == 10.0
    text = cpu_profile.table({"plain": cpu_profile.shares(PYSPY_RAW, "Thread-1 (watchdog)"),
                              "gate": shares}, top=2)
    assert "| `<module> (launch.py)` | 0.0 / 0.0 | 100.0 / 0.0 |" in text
    assert "plain: 50 samples · gate: 10 samples" in text


def test_cpu_profile_says_which_function_waited_for_the_gpu() -> None:
    raw = """\
thread (7): MainThread;loop (/x/scheduler.py:1);process_batch_result_decode (/x/p.py:201);Event.synchronize (/t/cuda/streams.py:230) 4
thread (7): MainThread;loop (/x/scheduler.py:1);resolve_seq_lens_cpu (/x/o.py:460);Stream.synchronize (/t/cuda/streams.py:100) 1
thread (7): MainThread;loop (/x/scheduler.py:1);synchronize_all (/x/s.py:3) 5
"""
    shares = cpu_profile.shares(raw)
    assert shares.gpu_waits == {"process_batch_result_decode (p.py)": 4, "resolve_seq_lens_cpu (o.py)": 1}
    text = cpu_profile.tables({"plain": cpu_profile.shares(PYSPY_RAW), "gate": shares}, top=5)
    waits = text[text.index("| waiting for the GPU in |"):]
    assert "| `process_batch_result_decode (p.py)` | 0.0 | 40.0 |" in waits
    assert "| `resolve_seq_lens_cpu (o.py)` | 0.0 | 10.0 |" in waits
    assert "synchronize_all" not in waits  # a function of that name, not torch's wait


def test_cpu_profile_keeps_alike_named_files_of_two_runs_apart() -> None:
    paths = [Path("a/pyspy-plain.txt"), Path("a/pyspy-gate.txt"), Path("b/pyspy-gate.txt")]
    assert cpu_profile.column_names(paths) == ["pyspy-plain", "a/pyspy-gate", "b/pyspy-gate"]


def fake_nvidia_smi(bin_dir: Path, csv: str) -> None:
    """An ``nvidia-smi`` on PATH that prints ``csv`` (CI has no GPU); a real subprocess runs it."""
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{csv}\nEOF\n")
    script.chmod(0o755)


def test_machine_line_names_the_host_cpu_and_each_gpu(tmp_path: Path, monkeypatch) -> None:
    fake_nvidia_smi(tmp_path / "bin", "NVIDIA H200, GPU-1234, 580.65, 1980, 700.00\n"
                                      "NVIDIA H200, GPU-5678, 580.65, [N/A], 700.00")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    line = machine.describe()
    assert line.startswith("# machine: ") and f" x {machine.cpu_model()}, " in line
    assert ("NVIDIA H200 GPU-1234 (driver 580.65, max SM clock 1980 MHz, power limit 700.00 W); "
            "NVIDIA H200 GPU-5678 (driver 580.65, max SM clock [N/A] MHz") in line
    # samples (soak.py) still take a field nvidia-smi cannot give as no sample
    assert machine.nvidia_smi("--query-gpu=clocks.max.sm") is None


def test_machine_line_without_nvidia_smi(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert machine.describe().endswith(", no GPU listed by nvidia-smi")
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9654 96-Core Processor\n")
    assert machine.cpu_model(cpuinfo) == "AMD EPYC 9654 96-Core Processor"


def test_cpu_profile_names_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cpu_profile.main([str(tmp_path / "nope.txt")])
    assert exit_info.value.code == 2
    assert "no py-spy raw file at" in capsys.readouterr().err


def test_steady_decode_throughput_from_the_scheduler_log(tmp_path: Path) -> None:
    def line(running: int, tok_s: float) -> str:  # SGLang 0.5.17's decode log line
        return (f"[2026-11-30 16:11:20] Decode batch, #running-req: {running}, #token: 12494, "
                f"token usage: 0.01, accept len: 1.00, accept rate: 0.00, cuda graph: True, "
                f"gen throughput (token/s): {tok_s}, #queue-req: 0\n")
    earlier = line(64, 1.0)  # another level's line, before the offset
    text = "".join([line(20, 500.0), line(58, 8000.0), line(64, 9000.0), line(60, 8500.0),
                    "[2026-11-30 16:11:20] Prefill batch, #new-seq: 1, #new-token: 396\n", line(40, 6000.0)])
    log = tmp_path / "server.log"
    log.write_text(earlier + text)
    level = decode_log.read_from(log, len(earlier))
    assert level == text
    # 58, 64 and 60 are >= 90 % of 64; the ramp-up (20) and the drain (40) are not. A prefill
    # ran in the interval of the last one (40) only.
    assert decode_log.steady_throughput(level, 64) == {
        "lines": 3, "median_tok_s": 8500.0, "decode_only": {"lines": 3, "median_tok_s": 8500.0},
        "prefill_cost": None}  # no interval of these held a prefill
    assert decode_log.steady_throughput(level, 128) is None
    assert decode_log.steady_throughput(level, 60, at_most=60)["lines"] == 2  # 58 and 60


def test_decode_only_throughput_leaves_out_intervals_a_prefill_interrupted() -> None:
    prefill = "[2026-11-30 16:11:20] Prefill batch, #new-seq: 3, #new-token: 1503\n"
    decode = ("[2026-11-30 16:11:20] Decode batch, #running-req: 128, #token: 1, token usage: 0.01, "
              "cuda graph: True, gen throughput (token/s): {}, #queue-req: 0\n")
    text = decode.format(14000.0) + prefill + prefill + decode.format(9000.0) + decode.format(14200.0)
    assert decode_log.prefill_batches(text) == {"batches": 2, "requests": 6, "tokens": 3006}
    assert decode_log.decode_intervals(text) == [(128, 14000.0, 0, 1.0), (128, 9000.0, 2, 1.0),
                                                 (128, 14200.0, 0, 1.0)]
    steady = decode_log.steady_throughput(text, 128)
    assert steady["median_tok_s"] == 14000.0
    assert steady["decode_only"] == {"lines": 2, "median_tok_s": 14100.0}


def test_prefill_cost_is_the_line_through_interval_durations_against_prefills() -> None:
    # 40 steps of 5 ms, and 20 ms a prefill batch: an interval with k prefills lasts 200 + 20k ms.
    # A speculative server's line counts its tokens with the accept length (2 tokens a step here).
    def interval(prefills: int, accept: float | None = None, extra_ms: float = 0.0) -> str:
        ms = 200.0 + 20.0 * prefills + extra_ms
        tok_s = 40 * 32 * (accept or 1.0) / (ms / 1000)
        accept_field = f"accept len: {accept:.2f}, " if accept else ""
        return ("[2026-12-02 14:30:00] Prefill batch, #new-seq: 1, #new-token: 500\n" * prefills
                + f"[2026-12-02 14:30:00] Decode batch, #running-req: 32, #token: 1, {accept_field}"
                f"gen throughput (token/s): {tok_s:.4f}, #queue-req: 0\n")
    text = "".join([interval(0), interval(1), interval(2, accept=2.0), interval(0, accept=1.0),
                    interval(1, extra_ms=800.0)])  # a level's edge: over 2.5x the median, dropped
    assert decode_log.prefill_cost(decode_log.decode_intervals(text)) == {
        "intervals": 4, "step_ms": 5.0, "per_prefill_ms": 20.0}
    assert decode_log.steady_throughput(text, 32)["prefill_cost"]["per_prefill_ms"] == 20.0
    # Without intervals free of prefills, the intercept would be extrapolated: none.
    assert decode_log.prefill_cost(decode_log.decode_intervals(interval(1) + interval(2))) is None


def test_step_ms_sets_plain_and_drafting_steps_of_a_level_apart(tmp_path: Path, capsys) -> None:
    # 40 steps a line at 32 requests: plain 6 ms a step; drafting (3 tokens a step) 12 ms; a
    # prefill adds 40 ms to its interval; a line mixing both (accept 1.5) falls in neither.
    def interval(step_ms: float, accept: float, prefills: int = 0, running: int = 32) -> str:
        ms = 40 * step_ms + 40.0 * prefills
        return ("[2026-12-07 08:20:30] Prefill batch, #new-seq: 1, #new-token: 200\n" * prefills
                + f"[2026-12-07 08:20:30] Decode batch, #running-req: {running}, #token: 1, "
                f"accept len: {accept:.2f}, gen throughput (token/s): {40 * running * accept / (ms / 1000):.4f}\n")
    text = "".join([interval(6, 1.0), interval(6, 1.0, prefills=1), interval(6, 1.0),
                    interval(12, 3.0, prefills=2), interval(12, 3.0, prefills=2),
                    interval(9, 1.5), interval(6, 1.0, running=8)])
    assert decode_log.step_ms(text, 32) == {"lines": 3, "step_ms": 6.0, "decode_only_step_ms": 6.0,
                                            "prefills_per_line": 0.33, "accept": 1.0}
    assert decode_log.step_ms(text, 32, min_accept=2.5) == {
        "lines": 2, "step_ms": 14.0, "decode_only_step_ms": None, "prefills_per_line": 2, "accept": 3.0}
    assert decode_log.step_ms(text, 64) is None
    log = tmp_path / "server.log"
    log.write_text(text)
    decode_log.main([str(log), "--concurrency", "32", "--step-ms", "2.5"])
    assert json.loads(capsys.readouterr().out)["32"]["drafting"]["step_ms"] == 14.0


def test_decode_log_cli_names_a_bad_concurrency_list(tmp_path: Path, capsys) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    with pytest.raises(SystemExit) as exit:
        decode_log.main([str(log), "--concurrency", "16,x"])
    assert exit.value.code == 2 and "argument --concurrency: '16,x': give comma-separated integers" in capsys.readouterr().err
    decode_log.main([str(log), "--concurrency", "16,32"])
    assert json.loads(capsys.readouterr().out) == {"16": None, "32": None}


def kernel(name: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": ts, "dur": dur}


def test_kernel_profile_sums_kernels_by_name_and_family(tmp_path: Path) -> None:
    # Two steps: each runs one GEMM, one attention and one elementwise kernel (us).
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 999},  # not a kernel
        kernel("nvjet_sm90_tst_256x128", 0, 300), kernel("_fwd_grouped_kernel_stage1", 300, 100),
        kernel("elementwise_kernel", 400, 100),
        kernel("nvjet_sm90_tst_256x128", 1000, 300), kernel("_fwd_grouped_kernel_stage1", 1300, 100),
        kernel("elementwise_kernel", 1400, 100),
    ]}
    summary = kernel_profile.summarize_trace(trace, steps=2)
    assert summary["busy_ms_per_step"] == pytest.approx(0.5)
    assert summary["span_ms_per_step"] == pytest.approx(0.75)
    assert summary["gpu_busy_fraction"] == pytest.approx(2 / 3)
    assert summary["family_ms_per_step"] == pytest.approx({"attention": 0.1, "gemm": 0.3, "other": 0.1})
    assert summary["top_kernels"][0] == {"name": "nvjet_sm90_tst_256x128", "ms_per_step": 0.3,
                                         "calls_per_step": 1.0}
    # Between the steps the GPU waited 500 us after the elementwise kernel; back to back otherwise.
    assert summary["idle_after"] == [{"after": "elementwise_kernel", "ms_per_step": 0.25,
                                      "pauses_per_step": 0.5}]
    with pytest.raises(ValueError, match="no GPU kernels"):
        kernel_profile.summarize_trace({"traceEvents": trace["traceEvents"][:1]}, steps=1)


def test_idle_after_counts_gaps_in_the_union_of_streams() -> None:
    # The plan stream's kernel overlaps the main one: no pause until after the longer one ends;
    # a 2 us gap is a launch inside a graph, not idle time.
    kernels = [kernel("main", 0, 100), kernel("plan", 50, 250), kernel("next", 310, 90),
               kernel("graph_node", 402, 10)]
    assert kernel_profile.idle_after(kernels, steps=1) == [
        {"after": "plan", "ms_per_step": pytest.approx(0.01), "pauses_per_step": 1.0}]


def test_prefill_intervals_measure_each_prefill_between_two_decode_steps(tmp_path: Path, capsys) -> None:
    decode, extend = trace_events.DECODE_ATTENTION, trace_events.EXTEND_ATTENTION
    trace = {"traceEvents": [
        kernel(decode, 0, 100), kernel("gemm", 100, 100),  # a decode step
        kernel(decode, 300, 100),  # the next one: no prefill in between
        kernel("embed", 1000, 100), kernel(extend, 1200, 300), kernel(extend, 1600, 200),  # prefill
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 1900, "dur": 100},
        kernel(decode, 2400, 100),  # the decode step after it
        kernel(extend, 3000, 100),  # a prefill the trace ends in: no decode step after it
    ]}
    assert kernel_profile.prefill_intervals(trace) == ([{"interval_ms": 2.0, "gpu_busy_ms": 0.7}], "kernel names")
    path = tmp_path / "t.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(trace, f)
    sys.argv = ["kernel_profile.py", str(path)]
    kernel_profile.main()
    assert json.loads(capsys.readouterr().out) == {
        "trace": str(path), "prefills": 1, "median_interval_ms": 2.0, "median_gpu_busy_ms": 0.7,
        "steps_told_by": "kernel names", "host_pace_us": {}, "host_calls_per_step": [],
        "host_ms_after_prefill": {}}  # a trace without the host
    with pytest.raises(ValueError, match=r"no prefill between two decode steps \(told apart by kernel names\)"):
        kernel_profile.prefill_interval_summary({"traceEvents": trace["traceEvents"][:3]})


def steps_launched_from_the_host(decode_step: str) -> list[dict]:
    """A decode step, a prefill and the decode step after it, on FlashInfer, whose kernel names
    Triton's name rules do not know: only the host spans of the forward steps that launched
    them tell decode work from a prefill's."""
    paged, ragged = "flashinfer::BatchPrefillWithPagedKVCacheKernel", "flashinfer::BatchPrefillWithRaggedKVCacheKernel"
    return [
        host("user_annotation", f"step[{decode_step} bs=64]", 0, 50),
        host("cuda_runtime", "cudaGraphLaunch", 10, 5, correlation=1),
        launched(paged, 20, 100, correlation=1), launched("nvjet_gemm", 120, 80, correlation=1),  # one replay
        host("cuda_runtime", "cudaGraphLaunch", 60, 5, correlation=2),  # after the step: sampling, a write
        launched(paged, 210, 40, correlation=2),
        host("user_annotation", "step[EXTEND bs=2 toks=700]", 100, 300),
        host("cuda_runtime", "cudaLaunchKernel", 110, 5, correlation=3),
        launched(ragged, 300, 400, correlation=3),
        host("user_annotation", "step[DRAFT_EXTEND_V2 bs=2]", 420, 20),  # neither decode nor prefill
        host("cuda_runtime", "cudaLaunchKernel", 425, 5, correlation=4),
        launched(paged, 800, 50, correlation=4),
        host("user_annotation", f"step[{decode_step} bs=66]", 500, 50),
        host("cuda_runtime", "cudaGraphLaunch", 510, 5, correlation=5),
        launched(paged, 1200, 100, correlation=5),
    ]


@pytest.mark.parametrize("decode_step", ["DECODE", "TARGET_VERIFY"])  # a plain server's, the gate's off step
def test_prefill_intervals_tell_steps_by_their_host_spans_on_any_backend(decode_step) -> None:
    events = steps_launched_from_the_host(decode_step)
    # From the first step's last kernel (ends at 200) to the next step's first (1200): 1 ms, GPU
    # busy in it 40 + 400 + 50 us.
    assert kernel_profile.prefill_intervals({"traceEvents": events}) == (
        [{"interval_ms": 1.0, "gpu_busy_ms": 0.49}], "step spans")
    without_host = [e for e in events if e["cat"] == "kernel"]
    assert kernel_profile.prefill_intervals(without_host) == ([], "kernel names")


def test_prefill_pauses_say_where_the_host_was_while_the_gpu_waited_in_a_prefill() -> None:
    events = steps_launched_from_the_host("TARGET_VERIFY") + [
        host("user_annotation", "scheduler.process_batch_result", 600, 550),
        host("cpu_op", "aten::cat", 900, 100),
    ]
    # The GPU pauses 200-210 and 250-300 (the prefill's step launching), 700-800 and 850-1200
    # (results, then nothing open after 1150 until the next step's kernel); sampled every 10 us,
    # a span's end included.
    assert kernel_profile.prefill_pauses({"traceEvents": events}) == {"prefill_pauses": {
        "prefills": 1, "idle_ms_per_prefill": pytest.approx(0.51), "host_ms_per_prefill": [
            {"where": "scheduler.process_batch_result", "ms": pytest.approx(0.3)},
            {"where": "scheduler.process_batch_result > aten::cat", "ms": pytest.approx(0.11)},
            {"where": "step[EXTEND]", "ms": pytest.approx(0.06)},
            {"where": "(no span)", "ms": pytest.approx(0.04)},
        ]}}
    kernels_only = [e for e in events if e["cat"] == "kernel"]
    assert kernel_profile.prefill_pauses({"traceEvents": kernels_only}) == {}  # no host recorded


def host(cat: str, name: str, ts: float, dur: float, correlation: int | None = None) -> dict:
    """A host-side event of a trace with CPU activity, on the scheduler's thread."""
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}
    return event | ({"args": {"correlation": correlation}} if correlation is not None else {})


def launched(name: str, ts: float, dur: float, correlation: int) -> dict:
    return kernel(name, ts, dur) | {"args": {"correlation": correlation}}


def host_and_gpu_trace() -> dict:
    """Two pauses of the GPU: one the host spent held by a sync, one it launched late in."""
    return {"traceEvents": [
        host("user_annotation", "scheduler.run_batch", 0, 550),
        host("cuda_runtime", "cudaLaunchKernel", 5, 5, correlation=1),
        launched("verify", 10, 270, correlation=1),
        host("cpu_op", "aten::copy_", 100, 200),
        host("cuda_runtime", "cudaStreamSynchronize", 100, 190),  # returns at 290, 10 us into the pause
        host("cuda_runtime", "cudaEventSynchronize", 320, 2),  # too short to have waited
        host("cpu_op", "aten::add", 390, 20),
        host("cuda_runtime", "cudaLaunchKernel", 400, 5, correlation=2),
        launched("add", 450, 50, correlation=2),  # the pause 280-450 ends here
        host("user_annotation", "scheduler.process_batch_result", 600, 300),
        host("cuda_runtime", "cudaMemcpyAsync", 600, 20),  # began inside the pause: host work
        host("cpu_op", "aten::index", 690, 20),
        host("cuda_driver", "cuLaunchKernel", 700, 5, correlation=3),
        launched("index", 800, 50, correlation=3),  # the pause 500-800: nothing held the host
        launched("graph_node", 852, 10, correlation=99),  # 2 us apart: no pause
        launched("orphan", 900, 10, correlation=98),  # launched before the trace began
    ]}


def test_idle_causes_tell_a_host_held_by_a_wait_from_a_late_one() -> None:
    causes = kernel_profile.idle_causes(host_and_gpu_trace(), steps=2)
    assert causes["idle_ms_per_step_by_cause"] == pytest.approx({"late": 0.15, "waited": 0.085, "unknown": 0.019})
    assert causes["idle_causes"] == [
        {"cause": "late", "where": "scheduler.process_batch_result > aten::index",
         "ms_per_step": pytest.approx(0.15), "pauses_per_step": 0.5},
        {"cause": "waited", "where": "scheduler.run_batch > aten::copy_ > cudaStreamSynchronize",
         "ms_per_step": pytest.approx(0.085), "pauses_per_step": 0.5},
        {"cause": "unknown", "where": "(no launching call in the trace)",
         "ms_per_step": pytest.approx(0.019), "pauses_per_step": 0.5},
    ]


def test_host_time_splits_each_span_into_working_and_waiting_on_the_gpu() -> None:
    trace = host_and_gpu_trace()
    trace["traceEvents"] += [host("user_annotation", "step[DECODE bs=16]", 20, 40),
                             host("user_annotation", "step[DECODE bs=15]", 1000, 60)]
    assert kernel_profile.host_time(trace, steps=2) == {"host_ms_per_step": [
        # run_batch: 550 us with a 190 us sync in it; its 2 us event sync is too short to have waited
        {"span": "scheduler.run_batch", "working": pytest.approx(0.18), "waiting": pytest.approx(0.095)},
        # process_batch_result: 300 us with a 20 us copy that waited on its stream
        {"span": "scheduler.process_batch_result", "working": pytest.approx(0.14), "waiting": pytest.approx(0.01)},
        {"span": "step[DECODE]", "working": pytest.approx(0.05), "waiting": 0.0},  # both batch sizes
    ]}


def test_host_pace_is_the_median_length_of_each_call_both_servers_make() -> None:
    trace = host_and_gpu_trace()  # one cudaLaunchKernel of 5 us, another of 5 us
    trace["traceEvents"] += [host("cpu_op", "aten::view", ts, dur) for ts, dur in ((0, 1), (10, 3), (20, 2))]
    trace["traceEvents"] += [kernel("aten::view", 30, 50)]  # GPU work of that name: not a host call
    assert kernel_profile.host_pace(trace) == {"host_pace_us": {"aten::view": 2, "cudaLaunchKernel": 5}}


def test_host_calls_per_step_counts_the_calls_around_each_kind_of_step() -> None:
    trace = host_and_gpu_trace()  # run_batch 0-550: two launches, a copy, its sync, another sync, an add
    trace["traceEvents"] += [
        host("user_annotation", "step[DECODE bs=16]", 20, 40),
        host("user_annotation", "scheduler.run_batch", 1000, 100),
        host("user_annotation", "step[DECODE bs=15]", 1010, 60),
        host("cpu_op", "aten::to", 1020, 10), host("cpu_op", "aten::copy_", 1022, 5),  # nested: both
        host("cuda_runtime", "cudaGraphLaunch", 1028, 1, correlation=7),  # nested in the aten::to
        launched("graph_node", 1100, 300, correlation=7), launched("graph_node", 1400, 100, correlation=7),
        host("user_annotation", "scheduler.run_batch", 2000, 300),
        host("user_annotation", "step[EXTEND bs=2 toks=40]", 2010, 200),
        host("cpu_op", "aten::empty", 2300, 1),  # at the span's end: inside
        host("user_annotation", "scheduler.run_batch", 3000, 50),  # no step in it: not counted
        host("cpu_op", "aten::view", 3010, 1),
    ]
    other_thread = host("cpu_op", "aten::view", 1030, 1) | {"tid": 2}
    trace["traceEvents"].append(other_thread)
    assert kernel_profile.host_calls_per_step(trace) == {"host_calls_per_step": [
        {"step": "step[DECODE]", "steps": 2, "calls": 4.5, "host_ms": pytest.approx(0.325),  # 6 and 3
         # top level: the first's launch, copy_, event sync and add, all before or after its
         # step[...] span (the copy_ holds its stream sync, the add its launch); the second's
         # aten::to in its step[...] (holding the copy_)
         "top_level_calls_by_span": {"scheduler.run_batch": 2.0, "step[DECODE]": 0.5},
         # the same calls' host time by span and name, us a step: the copy_ of 200 us first
         "top_level_us_by_op": {"scheduler.run_batch > aten::copy_": 100.0, "scheduler.run_batch > aten::add": 10.0,
                                "step[DECODE] > aten::to": 5.0, "scheduler.run_batch > cudaLaunchKernel": 2.5,
                                "scheduler.run_batch > cudaEventSynchronize": 1.0},
         # the second's graph (400 us) in its step[...] span; the first's two launches, the
         # verify (270 us) and the add (50 us), outside it
         "gpu_us_by_span": {"step[DECODE]": 200.0, "scheduler.run_batch": 160.0}},
        {"step": "step[EXTEND]", "steps": 1, "calls": 1, "host_ms": pytest.approx(0.3),
         "top_level_calls_by_span": {"scheduler.run_batch": 1.0},
         "top_level_us_by_op": {"scheduler.run_batch > aten::empty": 1.0}, "gpu_us_by_span": {}},
    ], "host_ms_after_prefill": {}}  # no decode step after the prefill
    assert kernel_profile.host_calls_per_step({"traceEvents": [kernel("gemm", 0, 5)]}) == {
        "host_calls_per_step": [], "host_ms_after_prefill": {}}


def test_host_ms_after_prefill_places_each_decode_step_after_the_last_prefill() -> None:
    events = []
    # decode (before any prefill: not placed), prefill, six decode steps of 1-6 ms, prefill, one of 9
    kinds = [("DECODE", 3)] + [("EXTEND", 20)] + [("TARGET_VERIFY", ms) for ms in range(1, 7)] + [
        ("EXTEND", 20), ("TARGET_VERIFY", 9)]
    t = 0
    for kind, ms in kinds:
        events += [host("user_annotation", "scheduler.run_batch", t, ms * 1000),
                   host("user_annotation", f"step[{kind} bs=4]", t + 1, 10)]
        t += 100_000
    placed = kernel_profile.host_calls_per_step({"traceEvents": events})["host_ms_after_prefill"]
    assert placed == {"first": 5.0, "second": 2.0, "third": 3.0, "later": 5.0}  # first: 1 and 9; later: 4, 5, 6


def mixed_steps_trace() -> dict:
    """Decode, prefill (its GPU busy 0.5 of its 2 ms interval), decode."""
    decode, extend = trace_events.DECODE_ATTENTION, trace_events.EXTEND_ATTENTION
    return {"traceEvents": [kernel(decode, 0, 100), kernel(extend, 500, 300), kernel("gemm", 900, 200),
                            kernel(decode, 2100, 100)]}


@pytest.mark.parametrize("flag, what", [("--profile-level", "profiles"), ("--warm-up-level", "repeats")])
@pytest.mark.parametrize("extra", [["8"], ["16", "--scenarios", "bursty"]])
def test_an_unreported_level_needs_a_closed_level_to_repeat(tmp_path: Path, capsys, flag, what,
                                                           extra) -> None:
    with pytest.raises(SystemExit):
        sweep.parse_args(sweep_args(tmp_path, "--concurrency", "16,32", flag, *extra))
    assert (f"{flag} {extra[0]} {what} a closed-loop level: give one of --concurrency 16,32"
            in capsys.readouterr().err)


def test_the_profiled_level_runs_after_the_measured_ones_outside_their_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "plain", "--concurrency", "16,32",
                          "--scenarios", "closed", "--profile-level", "16", "--dry-run"))
    bench = [line for line in capsys.readouterr().out.splitlines() if "sglang.benchmark.serving" in line]
    assert [line.split("--tag ")[1].split()[0] for line in bench] == [
        "plain,c=16", "plain,c=32", "plain,c=16,profiled"]
    assert "--max-concurrency 16" in bench[2] and "--num-prompts 128 " in bench[2]
    output_files = [line.split("--output-file ")[1].split()[0] for line in bench]
    assert output_files[0] == output_files[1] == str(tmp_path / "run" / "raw.jsonl") != output_files[2]


def test_the_warm_up_level_runs_before_the_measured_ones_outside_their_figures(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "plain", "--concurrency", "16,32",
                          "--scenarios", "closed", "--warm-up-level", "32", "--profile-level", "16",
                          "--dry-run"))
    bench = [line for line in capsys.readouterr().out.splitlines() if "sglang.benchmark.serving" in line]
    assert [line.split("--tag ")[1].split()[0] for line in bench] == [
        "plain,c=32,warm-up", "plain,c=16", "plain,c=32", "plain,c=16,profiled"]
    assert "--max-concurrency 32" in bench[0] and "--num-prompts 256 " in bench[0]
    output_files = [line.split("--output-file ")[1].split()[0] for line in bench]
    assert output_files[1] == output_files[2] == str(tmp_path / "run" / "raw.jsonl")
    assert len({output_files[0], output_files[1], output_files[3]}) == 3


def test_repeated_levels_run_back_to_back_between_the_unreported_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, "--configs", "plain", "--concurrency", "16,32", "--scenarios", "closed",
                          "--warm-up-level", "32", "--repeat-levels", "2", "--dry-run"))
    bench = [line for line in capsys.readouterr().out.splitlines() if "sglang.benchmark.serving" in line]
    assert [line.split("--tag ")[1].split()[0] for line in bench] == [
        "plain,c=32,warm-up", "plain,c=16,rep=1", "plain,c=16,rep=2", "plain,c=32,rep=1", "plain,c=32,rep=2"]
    assert {line.split("--output-file ")[1].split()[0] for line in bench[1:]} == {str(tmp_path / "run" / "raw.jsonl")}


def stand_in_level_run(tmp_path: Path, monkeypatch, *flags: str) -> record.Run:
    """A run whose closed_level can run on the CPU: no server answers (a server needs a GPU),
    so the calls that read one stand in; the client stands in too (StandInClient)."""
    run = record.Run(sweep.parse_args(sweep_args(tmp_path, "--concurrency", "16", *flags)))
    run.logs.mkdir(parents=True)
    (run.logs / "server-plain.log").write_text("")
    monkeypatch.setattr(levels, "reset_accept_length", lambda url, note: None)
    monkeypatch.setattr(levels, "gate_snapshot", lambda url: None)
    monkeypatch.setattr(levels, "stage_totals", lambda run, url: None)
    return run


class StandInClient:
    """The serving client: once ``level_over`` is set (at once without one), it writes its log
    and appends its row to --output-file."""

    def __init__(self, level_over: Optional[threading.Event] = None) -> None:
        self.level_over = level_over

    def run(self, argv: list[str], log: Path) -> int:
        if self.level_over is not None:
            assert self.level_over.wait(timeout=60), "the level's end never came"  # a bound, not a pace
        log.write_text("")
        tag, out = (argv[argv.index(flag) + 1] for flag in ("--tag", "--output-file"))
        with open(out, "a") as f:
            f.write(json.dumps(serving_row(tag, 16, 1000.0)) + "\n")
        return 0


def test_a_repeated_level_is_measured_under_its_own_tag_and_log(tmp_path: Path, monkeypatch) -> None:
    """closed_level itself, on the CPU: the sweep's code names, records and summarizes the level."""
    run = stand_in_level_run(tmp_path, monkeypatch, "--repeat-levels", "2")
    # The stand-in level lasts milliseconds, under the CPU clock's tick: the machine's CPU times
    # are stood in for, a busy CPU second and 15 idle ones apart, none stolen.
    cpu_times = collections.namedtuple("scputimes", "user system idle")
    readings = iter([cpu_times(10.0, 1.0, 100.0), cpu_times(11.0, 1.0, 115.0)])
    each_cpu = [cpu_times(5.0, 0.5, 50.0)] * 2
    monkeypatch.setattr(processes, "machine_cpu_times",
                        lambda per_cpu=False: each_cpu if per_cpu else next(readings))
    levels.closed_level(run, config.ServerConfig("plain", ()), StandInClient(), 16,
                       tmp_path / "prompts.jsonl", rep=2)
    assert run.failures == [] and (run.logs / "bench-plain-c16-rep2.log").exists()
    [row] = sweep_results.load_jsonl(run.dir / "gate.jsonl")
    assert row["tag"] == "plain,c=16,rep=2" and row["max_concurrency"] == 16
    assert row["cpu_busy"] == {}  # no server process stood in (test_scheduler_sampling.py has one)
    assert row["cpu_machine"]["steal_pct"] == 0 and row["cpu_machine"]["scheduler_rest"] == 0
    assert row["cpu_machine"]["cores_busy"] > 0  # that busy second over the level's milliseconds
    assert row["cpu_placement"] == {}  # no scheduler to watch
    assert row["ttft_split"] is None  # no --ttft-probe-interval


def test_a_probed_level_records_its_ttft_split(tmp_path: Path, monkeypatch) -> None:
    """closed_level with --ttft-probe-interval: the probe runs while the client does (the probe
    against an HTTP server: test_ttft_split.py)."""
    run = stand_in_level_run(tmp_path, monkeypatch, "--ttft-probe-interval", "0.01")
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text(json.dumps({"conversations": [{"role": "user", "content": "q"},
                                                     {"role": "assistant", "content": "a"}]}) + "\n")
    probed, two_probed = [], threading.Event()
    stamps = {"request_received_ts": 1.0, "api_server_dispatch_finish_ts": 1.001,
              "forward_entry_time": 1.1, "queue_time": 0.05, "prefill_finished_time": 1.15,
              "request_finished_ts": 1.2}

    def post(url: str, payload: dict) -> dict:
        probed.append((url, payload["text"]))
        if len(probed) == 2:
            two_probed.set()
        return {"meta_info": stamps}

    monkeypatch.setattr(ttft_probe, "post_generate", post)
    # The level lasts until two probes came back.
    levels.closed_level(run, config.ServerConfig("plain", ()), StandInClient(two_probed), 16, dataset)
    [row] = sweep_results.load_jsonl(run.dir / "gate.jsonl")
    assert probed[0] == ("http://127.0.0.1:30000", "q")
    assert row["ttft_split"] == {"probes": len(probed), "tokenize": 1.0, "to_scheduler": 49.0,
                                 "queue": 50.0, "prefill": 50.0, "back": 50.0}


INTERLEAVED = ("--configs", "gate,plain", "--thresholds", "9", "--scenarios", "closed", "--concurrency", "128")


def test_interleaved_servers_split_the_gpu_memory_and_take_turns_per_pair(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    sweep.main(sweep_args(tmp_path, *INTERLEAVED, "--warm-up-level", "128", "--repeat-levels", "3",
                          "--interleave", "--dry-run"))
    out = capsys.readouterr().out.splitlines()
    servers = [line for line in out if "sglang.launch_server" in line]
    assert ["--port 30000 " in servers[0], "--port 30001 " in servers[1]] == [True, True]
    # Each server's static memory is its fraction of what was free when it started:
    # 0.425 of the GPU, then 0.739 of the 0.575 left, again 0.425 of the GPU.
    assert "--mem-fraction-static 0.425 --sleep-on-idle" in servers[0]
    assert "--mem-fraction-static 0.739 --sleep-on-idle" in servers[1]
    bench = [line for line in out if "sglang.benchmark.serving" in line]
    assert [(line.split("--tag ")[1].split()[0], line.split("--base-url ")[1].split()[0][-5:]) for line in bench] == [
        ("gate-9,c=128,warm-up", "30000"), ("plain,c=128,warm-up", "30001"),
        ("gate-9,c=128,rep=1", "30000"), ("plain,c=128,rep=1", "30001"),
        ("plain,c=128,rep=2", "30001"), ("gate-9,c=128,rep=2", "30000"),
        ("gate-9,c=128,rep=3", "30000"), ("plain,c=128,rep=3", "30001")]


@pytest.mark.parametrize("extra, advice", [
    (["--configs", "gate", "--thresholds", "9"], "give --configs two or more"),
    (["--configs", "gate,plain"], "--thresholds auto needs plain and spec measured before the gates"),
    ([*INTERLEAVED, "--scenarios", "closed,bursty"], "closed levels only"),
    ([*INTERLEAVED, "--profile-concurrency", "16"], "profile one server at a time: drop them, "
                                                    "or profile a level with --profile-level C"),
    ([*INTERLEAVED, "--", "--mem-fraction-static=0.5"], "drop --mem-fraction-static"),
])
def test_interleave_names_what_it_cannot_run(tmp_path: Path, capsys, extra, advice) -> None:
    with pytest.raises(SystemExit) as exit_info:
        sweep.parse_args(sweep_args(tmp_path, "--interleave", *extra))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "error: --interleave: " in err and advice in err
    # two gates are two servers
    assert sweep.parse_args(sweep_args(tmp_path, "--interleave", "--configs", "gate", "--thresholds", "8,9",
                                       "--scenarios", "closed")).interleave


def test_interleaved_levels_reach_the_server_they_measure(tmp_path: Path, monkeypatch) -> None:
    """serve_interleaved on the CPU: servers and client stand in (a server needs a GPU); every
    level's client, counters and log belong to the server it measures, and both stay up."""
    args = sweep.parse_args(sweep_args(tmp_path, *INTERLEAVED, "--repeat-levels", "2", "--interleave"))
    run = record.Run(args)
    run.logs.mkdir(parents=True)
    configs = config.side_by_side(args, config.server_configs(args.configs, args.thresholds,
                                                            config.Speculation.from_args(args), run.dir))
    up: list[str] = []

    @contextmanager
    def stand_in_server(run, config):
        run.server_log(config).write_text("")
        up.append(config.name)
        yield True
        up.remove(config.name)

    asked: list[str] = []
    monkeypatch.setattr(sweep, "server", stand_in_server)
    monkeypatch.setattr(levels, "reset_accept_length", lambda url, note: None)
    monkeypatch.setattr(levels, "gate_snapshot", lambda url: asked.append(url))
    monkeypatch.setattr(levels, "stage_totals", lambda run, url: None)

    class Client:
        def __init__(self, *args, **kwargs) -> None:
            self.levels: list[tuple[str, str]] = []

        def __enter__(self) -> "Client":
            return self

        def __exit__(self, *exc) -> None:
            pass

        def run(self, argv: list[str], log: Path) -> int:
            assert up == ["gate-9", "plain"]
            log.write_text("")
            tag, out, url = (argv[argv.index(flag) + 1] for flag in ("--tag", "--output-file", "--base-url"))
            assert url == config.base_url(args, next(c for c in configs if tag.startswith(c.name + ",")))
            with open(out, "a") as f:
                f.write(json.dumps(serving_row(tag, 128, 1000.0)) + "\n")
            return 0

    monkeypatch.setattr(serving_session, "Session", Client)
    sweep.serve_interleaved(run, configs, tmp_path / "prompts.jsonl")
    assert run.failures == [] and up == []
    assert [r["tag"] for r in sweep_results.load_jsonl(run.dir / "raw.jsonl")] == [
        "gate-9,c=128,rep=1", "plain,c=128,rep=1", "plain,c=128,rep=2", "gate-9,c=128,rep=2"]
    assert asked == ["http://127.0.0.1:30000"] * 2 + ["http://127.0.0.1:30001"] * 4 + ["http://127.0.0.1:30000"] * 2


def test_interleaved_levels_go_on_without_a_server_that_failed_to_start(tmp_path: Path, monkeypatch) -> None:
    """serve_interleaved on the CPU, three servers standing in, the second failing at start:
    it is recorded as failed, and the other two still take their turns; with one left, none run."""
    args = sweep.parse_args(sweep_args(tmp_path, "--configs", "plain,spec,gate", "--thresholds", "9",
                                       "--scenarios", "closed", "--concurrency", "64", "--interleave"))
    run = record.Run(args)
    run.logs.mkdir(parents=True)
    configs = config.side_by_side(args, config.server_configs(args.configs, args.thresholds,
                                                            config.Speculation.from_args(args), run.dir))
    failing = {"spec"}
    measured: list[str] = []

    @contextmanager
    def stand_in_server(run, config):
        yield config.name not in failing

    monkeypatch.setattr(sweep, "server", stand_in_server)
    monkeypatch.setattr(sweep, "closed_loop",
                        lambda run, plan, dataset, log: measured.extend(config.name for config, *_ in plan))
    sweep.serve_interleaved(run, configs, tmp_path / "prompts.jsonl")
    assert run.failures == ["server spec (see logs/server-spec.log)"]
    assert measured == ["plain", "gate-9"]
    failing.add("plain")
    measured.clear()
    sweep.serve_interleaved(run, configs, tmp_path / "prompts.jsonl")
    assert measured == [] and len(run.failures) == 3


class LevelPastTheDelay:
    """LevelProfile's timer, for a level that outlasts LEVEL_PROFILE_DELAY_S: it fires as the
    level starts."""

    def __init__(self, delay_s: float, start: Callable[[], None]) -> None:
        self.start, self.cancel, self.join = start, lambda: None, lambda: None


class LevelWithinTheDelay(LevelPastTheDelay):
    """The timer of a level that ends within LEVEL_PROFILE_DELAY_S: it never fires."""

    def __init__(self, delay_s: float, start: Callable[[], None]) -> None:
        super().__init__(delay_s, lambda: None)


def level_profile_run(tmp_path: Path, monkeypatch, profiler_writes: bool, *flags: str,
                      trace: Callable[[], dict] = mixed_steps_trace) -> "record.Run":
    """A sweep whose server is a stand-in: /start_profile writes ``trace`` when
    ``profiler_writes``, else only once /stop_profile comes; the real LevelProfile around it."""
    run = record.Run(sweep.parse_args(sweep_args(tmp_path, "--concurrency", "16", "--profile-level", "16", *flags)))
    run.dir.mkdir(parents=True)
    shutil.rmtree(run.work, ignore_errors=True)  # as main() does: named after the run, not the test
    requests = []

    def write_trace(trace_dir: Path) -> None:
        with gzip.open(trace_dir / "x.trace.json.gz", "wt") as f:
            json.dump(trace(), f)

    def start_profile(url, trace_dir, num_steps=None, host=False):
        requests.append(("start", num_steps) + (("host",) if host else ()))
        trace_dir.mkdir(parents=True, exist_ok=True)
        if profiler_writes:
            write_trace(trace_dir)

    def http_request(url, payload=None, timeout=30):
        requests.append(("stop", None))
        write_trace(run.work / "profile-level-plain")
        return b""

    monkeypatch.setattr(profiles, "start_profile", start_profile)
    monkeypatch.setattr(profiles, "http_request", http_request)
    monkeypatch.setattr(profiles, "TRACE_SETTLE_S", 0)  # the stand-in writes its traces at once
    run.requests = requests
    return run


@pytest.mark.parametrize("profiler_writes, requests", [
    (True, [("start", 20)]),
    (False, [("start", 20), ("stop", None)]),  # the level ended before --profile-steps
])
def test_a_level_profile_traces_the_level_it_wraps(tmp_path: Path, monkeypatch, profiler_writes,
                                                   requests) -> None:
    run = level_profile_run(tmp_path, monkeypatch, profiler_writes)
    # No server writes the trace here: check once instead of polling for PROFILE_WAIT_S.
    monkeypatch.setattr(profiles, "wait_for", lambda condition, load=None, timeout=0, poll_s=0: condition())
    reads = []
    monkeypatch.setattr(trace_events, "read_trace",
                        lambda path, read=trace_events.read_trace: reads.append(path) or read(path))
    with profiles.LevelProfile(run, config.ServerConfig("plain", ()), 16, timer=LevelPastTheDelay):
        pass
    assert run.requests == requests and not run.failures
    assert len(reads) == 1  # a loaded level's trace is large: unzipped once for both summaries
    # The trace outlives the sweep's working directory, beside its summary.
    assert sorted(p.name for p in run.dir.glob("*.trace.json.gz")) == ["profile-level-plain.trace.json.gz"]
    assert not list((run.work / "profile-level-plain").glob("*.trace.json.gz"))
    summary = json.loads((run.dir / "profile-level-plain.json").read_text())
    assert (summary["phase"], summary["concurrency"], summary["steps"]) == ("level", 16, 20)
    assert summary["prefill_intervals"] == {"prefills": 1, "median_interval_ms": 2.0,
                                            "median_gpu_busy_ms": 0.5, "steps_told_by": "kernel names"}


def test_a_host_profile_says_what_held_the_host_in_each_gpu_pause(tmp_path: Path, monkeypatch) -> None:
    def trace() -> dict:  # the host's trace after the mixed steps
        later = [e | {"ts": e["ts"] + 10_000} for e in host_and_gpu_trace()["traceEvents"]]
        return {"traceEvents": mixed_steps_trace()["traceEvents"] + later}

    run = level_profile_run(tmp_path, monkeypatch, True, "--profile-host", trace=trace)
    with profiles.LevelProfile(run, config.ServerConfig("plain", ()), 16, timer=LevelPastTheDelay):
        pass
    assert run.requests == [("start", 20, "host")] and not run.failures
    summary = json.loads((run.dir / "profile-level-plain.json").read_text())
    assert {c["where"] for c in summary["idle_causes"]} >= {
        "scheduler.process_batch_result > aten::index",
        "scheduler.run_batch > aten::copy_ > cudaStreamSynchronize"}
    assert set(summary["idle_ms_per_step_by_cause"]) == {"late", "waited", "unknown"}
    assert [row["span"] for row in summary["host_ms_per_step"]] == [
        "scheduler.run_batch", "scheduler.process_batch_result"]
    assert summary["prefill_intervals"]["prefills"] == 1  # the rest of the summary as without


def test_start_profile_asks_for_the_host_only_when_told(tmp_path: Path, monkeypatch) -> None:
    asked = []  # no server: the request bodies /start_profile would get are the subject
    monkeypatch.setattr(endpoints, "http_request", lambda url, payload=None, timeout=30: asked.append(payload))
    endpoints.start_profile("http://x", tmp_path / "a", 20)
    endpoints.start_profile("http://x", tmp_path / "b", host=True)
    assert [(a["activities"], a.get("num_steps"), a["with_stack"]) for a in asked] == [
        (["GPU"], 20, False), (["CPU", "GPU"], None, False)]


def test_profile_host_needs_a_profile_to_record(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        sweep.parse_args(sweep_args(tmp_path, "--profile-host"))
    assert "--profile-host records the host in profiles: give --profile-level or --profile-concurrency" in capsys.readouterr().err


def test_a_level_shorter_than_the_profile_delay_fails_the_sweep(tmp_path: Path, monkeypatch) -> None:
    run = level_profile_run(tmp_path, monkeypatch, profiler_writes=True)
    with profiles.LevelProfile(run, config.ServerConfig("plain", ()), 16, timer=LevelWithinTheDelay):
        pass
    assert run.requests == [] and run.failures == ["plain level profile: the level ended within 8 s"]


def test_a_server_that_refuses_to_profile_fails_the_sweep_with_its_answer(tmp_path: Path, monkeypatch) -> None:
    run = level_profile_run(tmp_path, monkeypatch, profiler_writes=True)

    def refuse(url, trace_dir, num_steps=None, host=False):  # a server refusing the profile, as a GPU-less one would
        run.requests.append("start")
        raise urllib.error.HTTPError(url, 400, "Bad Request", None, None)

    monkeypatch.setattr(profiles, "start_profile", refuse)
    with profiles.LevelProfile(run, config.ServerConfig("plain", ()), 16, timer=LevelPastTheDelay):
        pass
    assert run.failures == ["plain level profile: /start_profile failed: HTTP Error 400: Bad Request"]


def test_report_shows_decode_and_prefill_profiles(run_dir: Path) -> None:
    def write(file: str, attention_us: float, **fields) -> None:
        trace = {"traceEvents": [kernel("_fwd_kernel", 0, attention_us), kernel("nvjet_x", 1000, 200)]}
        summary = kernel_profile.summarize_trace(trace, steps=1) | {"concurrency": 16, **fields}
        (run_dir / file).write_text(json.dumps(summary))

    # The decode ones as sweeps wrote them before prefill profiles existed: no phase.
    write("profile-plain.json", 600, config="plain")
    write("profile-gate-4.json", 800, config="gate-4")
    write("profile-prefill-plain.json", 1800, config="plain", phase="prefill")
    write("profile-prefill-gate-4.json", 2200, config="gate-4", phase="prefill")
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    decode = text[text.index("## Decode step profile"):text.index("## Prefill wave profile")]
    assert ("| gate-4 | 16 | 1.00 | 1.250 | 0.80 | 0.20 | 0.00 | 83% | `_fwd_kernel` 0.80 | "
            "`_fwd_kernel` 0.200 |") in decode
    prefill = text[text.index("## Prefill wave profile"):]
    assert "| GPU ms/wave | vs plain |" in prefill and "GPU busy" not in prefill.split("\n\n")[1]
    assert "| gate-4 | 16 | 2.40 | 1.200 | 2.20 | 0.20 | 0.00 | `_fwd_kernel` 2.20 |" in prefill


def test_report_shows_what_each_prefill_of_a_loaded_level_cost(run_dir: Path) -> None:
    for name, busy_us in (("plain", 200), ("gate-4", 300)):
        trace = mixed_steps_trace()
        trace["traceEvents"][2]["dur"] = busy_us
        summary = kernel_profile.summarize_trace(trace, steps=2) | {
            "config": name, "phase": "level", "concurrency": 16,
            "prefill_intervals": kernel_profile.prefill_interval_summary(trace)}
        (run_dir / f"profile-level-{name}.json").write_text(json.dumps(summary))
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    level = text[text.index("## Loaded level profile"):]
    assert "| plain | 1 | 2.0 | 1.00 | 0.5 |" in level
    assert "| gate-4 | 1 | 2.0 | 1.00 | 0.6 |" in level
    assert "What the host was doing" not in level  # profiled without --profile-host


def test_report_shows_what_the_host_did_in_the_gpu_pauses(run_dir: Path) -> None:
    trace = host_and_gpu_trace()
    summary = kernel_profile.summarize_trace(trace, steps=2) | kernel_profile.idle_causes(trace, steps=2) | {
        "config": "gate-4", "phase": "level", "concurrency": 16, "prefill_intervals": None}
    (run_dir / "profile-level-gate-4.json").write_text(json.dumps(summary))
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    causes = text[text.index("What the host was doing"):]
    assert "| gate-4 | all | late 0.150, waited 0.085, unknown 0.019 |  |  |" in causes
    assert ("| gate-4 | waited | `scheduler.run_batch > aten::copy_ > cudaStreamSynchronize` | 0.085 "
            "| 0.50 |") in causes
    assert "How long each span held the host" not in text  # summarized before host_time existed


def test_report_tables_each_configurations_host_time_by_span(run_dir: Path) -> None:
    for name, scale in (("plain", 1), ("gate-4", 2)):
        trace = host_and_gpu_trace()
        summary = (kernel_profile.summarize_trace(trace, steps=2) | kernel_profile.idle_causes(trace, steps=2)
                   | kernel_profile.host_time(trace, steps=2 / scale)
                   | {"config": name, "phase": "level", "concurrency": 16, "prefill_intervals": None})
        (run_dir / f"profile-level-{name}.json").write_text(json.dumps(summary))
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    host = text[text.index("How long each span held the host"):]
    assert "| span | gate-4 | plain |" in host or "| span | plain | gate-4 |" in host
    assert "`scheduler.run_batch` | " in host
    row = next(line for line in host.splitlines() if line.startswith("| `scheduler.run_batch`"))
    assert sorted(row.strip("| ").split(" | ")[1:]) == ["0.18 (0.10)", "0.36 (0.19)"]


def test_report_tables_how_fast_each_servers_host_ran_against_plains(run_dir: Path) -> None:
    paces = {"plain": {"aten::view": 2.0, "aten::slice": 4.0, "aten::empty": 5.0, "cudaLaunchKernel": 8.0},
             "gate-4": {"aten::view": 4.0, "aten::slice": 8.0, "aten::empty": 5.0, "cudaLaunchKernel": 8.0}}
    for name, pace in paces.items():
        trace = host_and_gpu_trace()
        summary = (kernel_profile.summarize_trace(trace, steps=2) | kernel_profile.host_time(trace, steps=2)
                   | {"config": name, "phase": "level", "concurrency": 16, "prefill_intervals": None,
                      "host_pace_us": pace})
        (run_dir / f"profile-level-{name}.json").write_text(json.dumps(summary))
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    pace = text[text.index("How fast each server's host ran"):]
    assert "| gate-4 | 4.00 | 8.00 | 5.00 | 8.00 | 1.41 |" in pace  # twice as long in two of four: 2 ** 0.5
    assert "| plain | 2.00 | 4.00 | 5.00 | 8.00 | 1.00 |" in pace


def test_report_tables_the_host_calls_of_each_kind_of_step(run_dir: Path) -> None:
    steps = {"plain": [{"step": "step[DECODE]", "steps": 152, "calls": 180.0, "host_ms": 4.19}],  # summarized before the split
             "gate-4": [{"step": "step[TARGET_VERIFY]", "steps": 144, "calls": 567.5, "host_ms": 8.04,
                         "top_level_calls_by_span": {"scheduler.run_batch": 133.5, "spec_gate.write_draft_kv": 24.6},
                         "top_level_us_by_op": {"step[TARGET_VERIFY] > cudaGraphLaunch": 1079.9,
                                                "scheduler.run_batch > aten::index": 250.9},
                         "gpu_us_by_span": {"step[TARGET_VERIFY]": 8141.2, "spec_gate.buffer_step_rows": 198.4}},
                        {"step": "step[EXTEND]", "steps": 56, "calls": 2870.5, "host_ms": 30.57,
                         "top_level_calls_by_span": {"step[EXTEND]": 187.2}}]}
    for name, per_step in steps.items():
        trace = host_and_gpu_trace()
        summary = (kernel_profile.summarize_trace(trace, steps=2)
                   | {"config": name, "phase": "level", "concurrency": 16, "prefill_intervals": None,
                      "host_calls_per_step": per_step})
        (run_dir / f"profile-level-{name}.json").write_text(json.dumps(summary))
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    calls = text[text.index("What a forward step cost the host"):]
    assert ("| gate-4 | `step[TARGET_VERIFY]` | 144 | 568 | 8.04 | `scheduler.run_batch` 133.5 · "
            "`spec_gate.write_draft_kv` 24.6 |") in calls
    assert "| gate-4 | `step[EXTEND]` | 56 | 2,870 | 30.57 | `step[EXTEND]` 187.2 |" in calls
    assert "| plain | `step[DECODE]` | 152 | 180 | 4.19 | – |" in calls
    ops = text[text.index("Where that host time went"):]
    assert ("| gate-4 | `step[TARGET_VERIFY]` | `step[TARGET_VERIFY] > cudaGraphLaunch` 1,079.9 · "
            "`scheduler.run_batch > aten::index` 250.9 |") in text  # only the steps that hold it
    assert "`step[EXTEND]`" not in ops and "| plain |" not in ops
    gpu = text[text.index("What a forward step cost the GPU"):]
    assert ("| gate-4 | `step[TARGET_VERIFY]` | `step[TARGET_VERIFY]` 8,141.2 · "
            "`spec_gate.buffer_step_rows` 198.4 |") in gpu
    assert "`step[EXTEND]`" not in gpu and "| plain |" not in gpu
    assert "place after the last prefill" not in calls  # no profile holds it


def test_report_tables_the_host_time_of_the_steps_after_a_prefill(run_dir: Path) -> None:
    placed = {"plain": {"first": 2.73, "second": 2.79, "third": 2.43, "later": 2.58},
              "gate-4": {"first": 6.87, "second": 5.44, "third": 5.34}}
    for name, after in placed.items():
        summary = (kernel_profile.summarize_trace(host_and_gpu_trace(), steps=2)
                   | {"config": name, "phase": "level", "concurrency": 16, "prefill_intervals": None,
                      "host_calls_per_step": [], "host_ms_after_prefill": after})
        (run_dir / f"profile-level-{name}.json").write_text(json.dumps(summary))
    text = report.markdown(sweep_results.load([run_dir]), [run_dir.name], 1000, 20, plot=None)
    after = text[text.index("place after the last prefill"):]
    assert "| gate-4 | 6.87 | 5.44 | 5.34 | – |" in after
    assert "| plain | 2.73 | 2.79 | 2.43 | 2.58 |" in after


def test_bursty_goodput(run_dir: Path) -> None:
    res = sweep_results.load([run_dir])
    assert [len(p) for p in res.bursty.values()] == [2, 2]
    gate = sweep_tables.bursty_stats(res.bursty["gate-4"], slo_ttft_ms=1000, slo_tpot_ms=20)
    # 5 requests: one failed, one over the TTFT SLO -> 3 good over 20 nominal seconds
    assert (gate.requests, gate.good, gate.seconds) == (5, 3, 20.0)
    assert gate.goodput == pytest.approx(0.15)
    assert sweep_tables.percentile(gate.tpot_ms, 50) == pytest.approx(7.5)
    spec = sweep_tables.bursty_stats(res.bursty["spec"], slo_ttft_ms=1000, slo_tpot_ms=20)
    assert spec.good == 2  # phase 1 misses the TPOT SLO
    text = sweep_tables.bursty_tables(res, 1000, 20)
    assert "| gate-4 | 5 | 60.0 % | 0.15 |" in text and "| 50 / 60 | 4 |" in text


def test_percentile_matches_numpy() -> None:
    import numpy as np

    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    for q in (0, 50, 90, 99, 100):
        assert sweep_tables.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_report_main_writes_table_and_plot(run_dir: Path) -> None:
    # matplotlib comes with the `bench` extra, which .ci/run installs.
    report.main([str(run_dir)])
    assert "## Envelope" in (run_dir / "report.md").read_text()
    png = (run_dir / "throughput.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"  # an image, not an empty file
    assert (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")) == (960, 960)  # 8x8 in at 120 dpi


def test_report_without_matplotlib(run_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import now raises ImportError
    report.main([str(run_dir)])
    assert "## Closed loop" in (run_dir / "report.md").read_text()
    assert not (run_dir / "throughput.png").exists()
    assert "matplotlib is not installed" in capsys.readouterr().out


# --------------------------------------------------------------------------- find_threshold


def test_crossover_interpolates_in_log2() -> None:
    x = find_threshold.find_crossover({1: 2.0, 2: 1.5, 4: 1.25, 8: 0.75})
    assert x.measured == 4
    assert x.crossover == pytest.approx(2 ** 2.5)  # r = 1 halfway between log2 4 and log2 8
    assert x.suggested == 5 and not x.non_monotone


def test_crossover_edge_cases() -> None:
    never = find_threshold.find_crossover({1: 0.9, 2: 0.8})
    assert never.measured is None and never.suggested is None
    always = find_threshold.find_crossover({1: 1.5, 2: 1.2})
    assert (always.measured, always.crossover, always.suggested) == (2, None, 2)
    noisy = find_threshold.find_crossover({1: 1.5, 2: 0.9, 4: 1.1, 8: 0.5})
    assert noisy.measured == 1 and noisy.non_monotone


def test_find_threshold_on_fixture(run_dir: Path, capsys: pytest.CaptureFixture) -> None:
    assert find_threshold.main([str(run_dir)]) == 0
    out = capsys.readouterr().out
    # spec/plain: 2.0, 1.79, 1.32, 0.8 -> crossover between 4 and 8
    r4, r8 = 1000 / 760, 1200 / 1500
    expected = 2 ** (2 + (r4 - 1) / (r4 - r8))
    assert f"| {run_dir.name} | 2.50 |" in out
    assert f"| {expected:.1f} | {math.floor(expected)} |" in out


def test_sweep_gates_at_the_n_its_own_plain_and_spec_rows_suggest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Serving needs a GPU: serve_and_load is replaced by a stand-in that writes the rows a
    # plain and a spec server would have produced (the fixture's throughputs).
    served = []

    def fake_serve_and_load(run, config, dataset):
        served.append(config.name)
        rates = {"plain": PLAIN, "spec": SPEC}.get(config.name, {})
        with (run.dir / "raw.jsonl").open("a") as raw:
            for c, tput in rates.items():
                raw.write(json.dumps(serving_row(f"{config.name},c={c}", c, tput)) + "\n")

    monkeypatch.setattr(sweep, "serve_and_load", fake_serve_and_load)
    assert sweep.main(sweep_args(tmp_path, "--scenarios", "closed", "--concurrency", "1,2,4,8,16",
                                 "--rows", "200")) == 0
    # spec / plain = 2.0, 1.79, 1.32, 0.8, 0.5 at C = 1..16: crossover 6.1 (as find_threshold says)
    assert served == ["plain", "spec", "upstream-gate-6", "gate-6"]
    assert "# --thresholds auto: find_threshold.py suggests 6" in (
        tmp_path / "run" / "command.txt").read_text()


def test_sweep_auto_threshold_without_plain_and_spec_rows_fails_clearly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    served = []  # servers need a GPU: record which configurations the sweep would start
    monkeypatch.setattr(sweep, "serve_and_load", lambda run, config, dataset: served.append(config))
    assert sweep.main(sweep_args(tmp_path, "--configs", "gate", "--scenarios", "closed",
                                 "--rows", "2000")) == 1
    assert served == []
    assert "list plain,spec before the gates in --configs, or pass --thresholds N" in (
        capsys.readouterr().out)


def test_dry_run_with_auto_threshold_says_why_no_gate_command(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert sweep.main(sweep_args(tmp_path, "--concurrency", "1", "--scenarios", "closed",
                                 "--dry-run")) == 0
    out = capsys.readouterr().out
    assert out.count("sglang.launch_server") == 2  # plain and spec
    assert "--thresholds auto: the gates' N comes from the plain and spec rows" in out


def test_find_threshold_with_a_shared_plain_run(run_dir: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    spec_only = tmp_path / "spec-only"
    spec_only.mkdir()
    rows = sweep_results.load_jsonl(run_dir / "raw.jsonl")
    write_jsonl(spec_only / "raw.jsonl", [r for r in rows if r["tag"].startswith("spec,")])
    assert find_threshold.main([str(spec_only)]) == 1  # no plain rows of its own
    assert find_threshold.main([str(spec_only), "--plain", str(run_dir)]) == 0
    assert "| spec-only | 2.50 |" in capsys.readouterr().out


# gpu_job.sh's helpers for a dry run of a plan: the sweeps and soaks print their commands, the
# rest (model generation, GPU tests) needs a GPU and is skipped, and the kit has every kernel.
DRY_RUN_HELPERS = """
phase() {
  local name=$1 script; shift
  case "$2" in
    benchmark/sweep.py|benchmark/soak.py) script=("$2"); shift 2 ;;
    -m) script=(-m "$3"); shift 3 ;;
    *) case "$*" in  # a script this helper would not check
         *benchmark/sweep.py*|*benchmark/soak.py*|*benchmark.client.*) echo "$name: $*" >> "$RESULTS/unchecked" ;;
       esac
       return 0 ;;
  esac
  "$PYTHON" "${script[@]}" --dry-run "$@" > /dev/null 2> "$RESULTS/$name.err" \\
    || cat "$RESULTS/$name.err" >> "$RESULTS/refused"
}
gpu_tests() { :; }
keep_lines() { :; }
flashinfer_has_kernels() { :; }
fa3_has_kernels() { :; }
"""


def documented_plan_runs() -> list[tuple[Path, dict[str, str]]]:
    """Each plan with the variables of every run its header documents
    (``#   VAR=value ... bash benchmark/gpu_job.sh start benchmark/plans/NAME.sh``)."""
    runs = []
    for plan in sorted((BENCH / "plans").glob("*.sh")):
        start = re.compile(r"^#\s+((?:\w+=\S+\s+)*)bash benchmark/gpu_job\.sh start "
                           + re.escape(f"benchmark/plans/{plan.name} "), re.MULTILINE)
        documented = [dict(a.split("=", 1) for a in m.group(1).split()) for m in start.finditer(plan.read_text())]
        assert documented, f"{plan.name} documents no gpu_job.sh start command"
        runs += [(plan, variables) for variables in documented]
    return runs


@pytest.mark.parametrize(("plan", "variables"), documented_plan_runs(),
                         ids=lambda v: v.name if isinstance(v, Path) else " ".join(f"{k}={x}" for k, x in v.items()))
def test_gpu_job_plans_pass_their_scripts_options(plan, variables, tmp_path):
    """Each plan's sweeps and soaks accept its options (a dry run), in every run its header
    documents: a plan is only ever run on the lent GPU host, where a stale option costs a
    session's device minutes."""
    import subprocess
    import sys

    (tmp_path / "helpers.sh").write_text(DRY_RUN_HELPERS)
    results = tmp_path / "results"
    results.mkdir()
    env = {"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "RESULTS": str(results),
           "TMPDIR": str(tmp_path), **variables}
    subprocess.run(["bash", "-c", f"source {tmp_path / 'helpers.sh'}; source {plan}; wait"],
                   cwd=BENCH.parent, env=env, check=True, capture_output=True, text=True)
    refused = results / "refused"
    assert not refused.exists(), refused.read_text()
    unchecked = results / "unchecked"
    assert not unchecked.exists(), unchecked.read_text()  # every script a phase ran was dry-run


def test_gpu_job_start_without_a_working_kit_leaves_no_plan_looking_run(tmp_path):
    """benchmark/gpu_job.sh start: without the kit (.gpu is git-ignored, so a checkout's copy on
    the GPU host lacks it unless carried) it says so; with a kit pip refuses, it removes the
    results folder it made, which the next start would otherwise take for a running plan."""
    import subprocess

    job = tmp_path / "job"
    env = {"PATH": "/usr/bin:/bin", "GPU_JOB_DIR": str(job), "OUT": str(tmp_path / "out"), "HOME": str(tmp_path)}
    start = ["bash", str(BENCH / "gpu_job.sh"), "start", str(BENCH / "plans/interleaved_ab.sh"), "30"]
    no_kit = subprocess.run(start, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert no_kit.returncode == 1 and "no GPU kit in .gpu/wheels" in no_kit.stderr
    assert not (job / "results").exists()
    (tmp_path / ".gpu/wheels").mkdir(parents=True)
    (tmp_path / ".gpu/wheels/broken-0.1-py3-none-any.whl").write_text("not a wheel")
    broken = subprocess.run(start, cwd=tmp_path, env=env | {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"},
                            capture_output=True, text=True)
    assert broken.returncode == 1 and not (job / "results").exists()


def test_gpu_job_runs_a_plan_and_packs_what_it_wrote(tmp_path):
    """benchmark/gpu_job.sh's run and wait (start adds the kit's install, which needs the GPU
    host): the plan's phases run, servers' logs are cut to their lines, $OUT gets the results."""
    import subprocess
    import tarfile

    job, out = tmp_path / "job", tmp_path / "out"
    (job / "results").mkdir(parents=True)
    out.mkdir()
    (job / "plan.sh").write_text(
        "phase greet bash -c 'echo hello; exit 3' || echo failed > $RESULTS/control.log\n"
        "mkdir -p $RESULTS/sweep/logs\n"
        "printf 'Decode batch, #running-req: 9\\nweights loaded\\n' > $RESULTS/sweep/logs/server-plain.log\n"
        "keep_lines $RESULTS/sweep/logs\n")
    built = tmp_path / "home/.cache/flashinfer/0.6.15.post1/90a/cached_ops/norm"
    built.mkdir(parents=True)
    (built / "norm.so").write_bytes(b"\x7fELF")  # what FlashInfer's JIT built on the host
    env = {"PATH": "/usr/bin:/bin", "GPU_JOB_DIR": str(job), "OUT": str(out), "HOME": str(tmp_path / "home")}
    script = str(BENCH / "gpu_job.sh")
    subprocess.run(["bash", script, "run"], cwd=tmp_path, env=env, check=True, capture_output=True)
    subprocess.run(["bash", script, "wait", "30"], env=env, check=True, capture_output=True, timeout=20)
    with tarfile.open(out / "results.tgz") as tar:
        members = {m.name: m for m in tar.getmembers()}
        read = lambda name: tar.extractfile(members[name]).read().decode()
        assert read("results/greet.log") == "hello\n"
        assert read("results/control.log") == "failed\n"  # phase returned the command's status
        assert "end greet: exit 3" in read("results/job.log") and "plan done" in read("results/job.log")
        assert read("results/sweep/logs/server-plain-lines.txt") == "Decode batch, #running-req: 9\n"
        assert "results/sweep/logs/server-plain.log" not in members  # the whole log stays behind
        assert "results/PLAN_DONE" in members
    with tarfile.open(out / "flashinfer-aot.tar.xz") as tar:  # laid out as FlashInfer's AOT directory
        assert tar.getnames() == ["norm/norm.so"]
    (job / "results" / "PLAN_DONE").unlink()  # as while a plan runs: a second start must not clobber it
    started = subprocess.run(["bash", script, "start", str(job / "plan.sh"), "30"], env=env,
                             capture_output=True, text=True)
    assert started.returncode == 1 and "a plan is still running here" in started.stderr


def test_gpu_job_runs_flashinfer_kernels_once_a_plan_and_stops_a_plan_they_fail(tmp_path):
    """gpu_job.sh's flashinfer_has_kernels: the carried kernels' probe decides, once a plan (job.log
    keeps its verdict); where it fails (here the real probe, on a host with no GPU) the plan is told
    to run nothing, and job.log says why."""
    import subprocess

    def run_plan(cwd: Path) -> tuple[list[str], str]:
        job = tmp_path / "job"
        shutil.rmtree(job, ignore_errors=True)
        (job / "results").mkdir(parents=True)
        (job / "plan.sh").write_text("for i in 1 2; do flashinfer_has_kernels 1b && echo yes || echo no; done"
                                     " > $RESULTS/answers.log\n")
        env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "GPU_JOB_DIR": str(job),
               "OUT": str(tmp_path / "out"), "HOME": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
        subprocess.run(["bash", str(BENCH / "gpu_job.sh"), "run"], cwd=cwd, env=env, check=True, capture_output=True)
        answers = (job / "results/answers.log").read_text().splitlines()
        return [a for a in answers if a in ("yes", "no")], (job / "results/job.log").read_text()

    answers, log = run_plan(BENCH.parent)
    assert answers == ["no", "no"] and "needs a CUDA GPU" in log
    assert "not run: FlashInfer can neither load nor build the 1b pair's kernels" in log

    passing = tmp_path / "checkout"
    (passing / "benchmark").mkdir(parents=True)
    (passing / "benchmark/flashinfer_kernels.py").write_text(
        "print('FlashInfer kernels for 1b pass')\nprint('probed', file=open('probes', 'a'))\n")
    assert run_plan(passing)[0] == ["yes", "yes"]
    assert (passing / "probes").read_text() == "probed\n"  # the second answer came from job.log
