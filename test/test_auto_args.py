"""``--speculative-disable-batch-threshold auto`` and ``--speculative-gate-candidate-steps``
through SGLang's real argument machinery: CLI, env, --config YAML, Engine kwarg, pickling,
re-resolution; its bad inputs are in test_args.BAD_CLI."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from test_args import CANDIDATES, ENV, FLAG, engine_args, engine_kwargs, parse, parse_record

from sglang_specgate.args import auto_gate_config, gate_config, gate_is_auto
from sglang_specgate.auto_policy import AutoGateConfig
from sglang_specgate.sglang_versions import installed, installed_release

pytestmark = pytest.mark.usefixtures("plugins_loaded", "clean_env")


@pytest.mark.parametrize("value", ["auto", "AUTO", " Auto "])
def test_the_flag_takes_auto_and_keeps_it_as_given(value, eagle_argv):
    args = parse(eagle_argv + [FLAG, value])
    assert args.speculative_disable_batch_threshold == "auto"  # what /server_info shows
    assert gate_is_auto(args)
    assert not gate_config(args).enabled  # the threshold gate is not the one running
    # Every draft step count from plain to --speculative-num-steps 3, the dwell as for N.
    assert auto_gate_config(args) == AutoGateConfig(candidates=(0, 1, 2, 3), dwell_steps=8)


def test_candidates_and_dwell(eagle_argv):
    args = parse(eagle_argv + [FLAG, "auto", CANDIDATES, "3,0,1", "--speculative-gate-dwell-steps", "4"])
    assert args.speculative_gate_candidate_steps == [3, 0, 1]
    assert auto_gate_config(args) == AutoGateConfig(candidates=(0, 1, 3), dwell_steps=4)


def test_the_environment_and_yaml_take_auto(eagle_argv, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "auto")
    assert gate_is_auto(parse(eagle_argv))
    assert parse(eagle_argv + [FLAG, "16"]).speculative_disable_batch_threshold == 16  # the flag wins
    monkeypatch.delenv(ENV)
    config = tmp_path / "server.yaml"
    config.write_text(f"speculative-disable-batch-threshold: auto\n{CANDIDATES[2:]}: \"0,2\"\n")
    args = parse(eagle_argv + ["--config", str(config)])
    assert auto_gate_config(args).candidates == (0, 2)


def test_the_engine_kwarg_takes_auto_and_a_list(model_dirs):
    args = engine_args(**engine_kwargs(
        model_dirs, speculative_disable_batch_threshold="auto", speculative_gate_candidate_steps=[0, 3]))
    assert auto_gate_config(args).candidates == (0, 3)


def test_auto_pickles_to_children_intact(eagle_argv):
    record = parse_record(eagle_argv + [FLAG, "auto", CANDIDATES, "0,1,3"])
    clone = pickle.loads(pickle.dumps(record))  # as the scheduler processes receive it
    assert auto_gate_config(installed().resolved(clone)) == auto_gate_config(installed().resolved(record))
    assert installed().resolved(clone).speculative_disable_batch_threshold == "auto"


@pytest.mark.skipif(installed_release() != "0.5.17", reason="0.5.17 only: 0.5.23 resolves a record once")
def test_auto_resolves_again_unchanged(eagle_argv, capsys):
    record = parse_record(eagle_argv + [FLAG, "auto", CANDIDATES, "0,1,3"])
    capsys.readouterr()
    again = dataclasses.replace(record)  # SGLang's Ray engine re-runs __post_init__
    assert auto_gate_config(again) == auto_gate_config(record) == AutoGateConfig((0, 1, 3))
    assert capsys.readouterr().err == ""


def test_candidates_beside_a_number_warn_and_are_dropped(eagle_argv, capsys):
    args = parse(eagle_argv + [FLAG, "16", CANDIDATES, "0,1", "--max-running-requests", "64"])
    assert args.speculative_gate_candidate_steps is None
    assert f"{CANDIDATES} 0,1: no effect with {FLAG} 16; it applies to {FLAG} auto only" in capsys.readouterr().err


def test_candidates_with_the_gate_off_warn(eagle_argv, capsys):
    parse(eagle_argv + [CANDIDATES, "0,1"])
    assert f"{CANDIDATES} 0,1: no effect, the gate is off" in capsys.readouterr().err
