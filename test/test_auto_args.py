"""``--speculative-disable-batch-threshold auto`` and ``--speculative-gate-candidate-steps``
through SGLang's real argument machinery: CLI, env, --config YAML, Engine kwarg, pickling,
re-resolution; its bad inputs are in test_args.BAD_CLI."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from test_args import CANDIDATES, ENV, FLAG, engine_kwargs, parse

from sglang_specgate.auto_policy import AutoGateConfig

pytestmark = pytest.mark.usefixtures("plugins_loaded", "clean_env")


@pytest.mark.parametrize("value", ["auto", "AUTO", " Auto "])
def test_the_flag_takes_auto_and_keeps_it_as_given(value, eagle_argv):
    args = parse(eagle_argv + [FLAG, value])
    assert args.speculative_disable_batch_threshold == "auto"  # what /server_info shows
    assert args.gate_is_auto()
    assert not args.gate_config().enabled  # the threshold gate is not the one running
    # Every draft step count from plain to --speculative-num-steps 3, the dwell as for N.
    assert args.auto_gate_config() == AutoGateConfig(candidates=(0, 1, 2, 3), dwell_steps=8)


def test_candidates_and_dwell(eagle_argv):
    args = parse(eagle_argv + [FLAG, "auto", CANDIDATES, "3,0,1", "--speculative-gate-dwell-steps", "4"])
    assert args.speculative_gate_candidate_steps == [3, 0, 1]
    assert args.auto_gate_config() == AutoGateConfig(candidates=(0, 1, 3), dwell_steps=4)


def test_the_environment_and_yaml_take_auto(eagle_argv, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "auto")
    assert parse(eagle_argv).gate_is_auto()
    assert parse(eagle_argv + [FLAG, "16"]).speculative_disable_batch_threshold == 16  # the flag wins
    monkeypatch.delenv(ENV)
    config = tmp_path / "server.yaml"
    config.write_text(f"speculative-disable-batch-threshold: auto\n{CANDIDATES[2:]}: \"0,2\"\n")
    args = parse(eagle_argv + ["--config", str(config)])
    assert args.auto_gate_config().candidates == (0, 2)


def test_the_engine_kwarg_takes_auto_and_a_list(model_dirs):
    from sglang.srt.entrypoints.engine import Engine

    args = Engine.server_args_class(**engine_kwargs(
        model_dirs, speculative_disable_batch_threshold="auto", speculative_gate_candidate_steps=[0, 3]))
    assert args.auto_gate_config().candidates == (0, 3)


def test_auto_pickles_and_resolves_again_unchanged(eagle_argv, capsys):
    args = parse(eagle_argv + [FLAG, "auto", CANDIDATES, "0,1,3"])
    clone = pickle.loads(pickle.dumps(args))
    assert clone.auto_gate_config() == args.auto_gate_config()
    capsys.readouterr()
    again = dataclasses.replace(args)  # SGLang's Ray engine re-runs __post_init__
    assert again.auto_gate_config() == args.auto_gate_config()
    assert again.speculative_disable_batch_threshold == "auto"
    assert capsys.readouterr().err == ""


def test_candidates_beside_a_number_warn_and_are_dropped(eagle_argv, capsys):
    args = parse(eagle_argv + [FLAG, "16", CANDIDATES, "0,1", "--max-running-requests", "64"])
    assert args.speculative_gate_candidate_steps is None
    assert f"{CANDIDATES} 0,1: no effect with {FLAG} 16; it applies to {FLAG} auto only" in capsys.readouterr().err


def test_candidates_with_the_gate_off_warn(eagle_argv, capsys):
    parse(eagle_argv + [CANDIDATES, "0,1"])
    assert f"{CANDIDATES} 0,1: no effect, the gate is off" in capsys.readouterr().err
