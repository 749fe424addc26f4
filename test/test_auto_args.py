"""``--speculative-disable-batch-threshold auto`` and ``--speculative-gate-candidate-steps``
through SGLang's real argument machinery: CLI, env, --config YAML, Engine kwarg, pickling,
re-resolution and every bad input's message."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from test_args import ENV, FLAG, engine_kwargs, parse

from sglang_specgate.auto_policy import AutoGateConfig

pytestmark = pytest.mark.usefixtures("plugins_loaded", "clean_env")

CANDIDATES = "--speculative-gate-candidate-steps"
REENABLE = "--speculative-gate-reenable-threshold"


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


# (name, argv after the EAGLE-3 configuration, env value, substrings the error must contain)
BAD = [
    ("garbage threshold", [FLAG, "sometimes"], None, [FLAG, "non-negative integer or 'auto'", "'sometimes'"]),
    ("garbage env", [], "automatic", [ENV, "non-negative integer or 'auto'", "'automatic'"]),
    ("candidates not counts", [FLAG, "auto", CANDIDATES, "0,one"], None,
     [CANDIDATES, "draft step counts separated by commas", "'0,one'"]),
    ("candidates empty", [FLAG, "auto", CANDIDATES, ""], None, [CANDIDATES, "draft step counts"]),
    ("candidates without plain", [FLAG, "auto", CANDIDATES, "1,3"], None,
     [CANDIDATES, "must hold 0 (plain) and at least one k >= 1"]),
    ("candidates plain only", [FLAG, "auto", CANDIDATES, "0"], None,
     [CANDIDATES, "must hold 0 (plain) and at least one k >= 1"]),
    ("candidates twice", [FLAG, "auto", CANDIDATES, "0,1,1"], None, [CANDIDATES, "distinct"]),
    ("candidates beyond the steps", [FLAG, "auto", CANDIDATES, "0,5"], None,
     [f"{CANDIDATES} 0,5 goes beyond --speculative-num-steps 3", "Raise --speculative-num-steps to 5"]),
    ("re-enable threshold", [FLAG, "auto", REENABLE, "4"], None,
     [f"{REENABLE} 4 does not apply to {FLAG} auto", f"Drop {REENABLE}"]),
    ("no decode graphs", [FLAG, "auto", "--cuda-graph-backend-decode", "disabled"], None,
     [f"{FLAG} auto measures", "decode graphs are disabled", "--cuda-graph-backend-decode full"]),
    ("breakable decode graphs", [FLAG, "auto", "--cuda-graph-backend-decode", "breakable"], None,
     [f"{FLAG} auto measures", "decode graphs are breakable"]),
    ("env auto without decode graphs", ["--disable-decode-cuda-graph"], "auto",
     [f"{ENV}=auto in the environment measures", "without --disable-cuda-graph"]),
    ("auto with upstream adaptive", [FLAG, "auto", "--speculative-adaptive"], None,
     [f"{FLAG} auto cannot be combined with --speculative-adaptive"]),
    ("auto with trees", [FLAG, "auto", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
     None, [f"{FLAG} auto: the gate supports chain drafting only"]),
]


@pytest.mark.parametrize("name, extra, env, expected", BAD, ids=[c[0] for c in BAD])
def test_bad_input_exits_2_with_clear_message(name, extra, env, expected, eagle_argv, monkeypatch, capsys):
    if env is not None:
        monkeypatch.setenv(ENV, env)
    with pytest.raises(SystemExit) as exit_info:
        parse(eagle_argv + extra)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, f"{text!r} missing from: {err}"
    assert "Traceback" not in err
