"""The gate's ServerArgs fields through SGLang's real argument machinery (in this process,
after SGLang's own plugin loader ran): CLI, --config YAML, env, Engine kwargs, pickling and
every bad input's message, on the installed release (tree drafting's: test_tree_args.py).
Records are resolved as that release's launcher does (0.5.17 in prepare_server_args, 0.5.23 in
resolve_once) and read as its workers do (sglang_versions.*.resolved)."""

from __future__ import annotations

import pickle

import pytest

from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed, installed_release

pytestmark = pytest.mark.usefixtures("plugins_loaded", "clean_env")

FLAG = "--speculative-disable-batch-threshold"
ENV = "SGLANG_SPEC_DISABLE_BATCH_THRESHOLD"
HOST_SEQ_LENS_ENV = "SGLANG_SPEC_GATE_HOST_SEQ_LENS"
FA3_OFF_PATH_ENV = "SGLANG_SPEC_GATE_FA3_OFF_PATH"
CANDIDATES = "--speculative-gate-candidate-steps"
REENABLE = "--speculative-gate-reenable-threshold"


# Where the gate's fast off path has not run on a GPU, every gated server is told so instead of
# being told about its attention backend (args.slower_off_path).
FAST_OFF_PATH_HERE = installed_release() in FAST_OFF_PATH_RELEASES
UPSTREAM_OFF_STEPS = f"speculation-off steps run upstream's steps-0 state on SGLang {installed_release()}"

# The release's flags for DP attention and the largest decode graph. 0.5.23 logs a warning for
# its deprecated --enable-dp-attention while parsing, to pytest's log handlers, which an earlier
# prepare_server_args closed (logging.basicConfig(force=True)): the tests use its new flag.
DP_ATTENTION = {"0.5.17": ["--enable-dp-attention", "--dp-size", "2", "--tp-size", "2"],
                "0.5.23": ["--attn-dp-size", "2", "--tp-size", "2"]}[installed_release()]
DP_ATTENTION_FLAG = installed().DP_ATTENTION_FLAG
GRAPH_MAX_BS = installed().DECODE_GRAPH_MAX_BS_FLAG


def parse_record(argv):
    """The record a launcher resolves, from a command line."""
    from sglang.srt.server_args import prepare_server_args

    record = prepare_server_args(argv)
    installed().resolve(record)
    return record


def parse(argv):
    """The resolved values of a command line."""
    return installed().resolved(parse_record(argv))


def engine_args(**kwargs):
    """What sglang.Engine(**kwargs) resolves (engine.py builds server_args_class(**kwargs))."""
    from sglang.srt.entrypoints.engine import Engine

    record = Engine.server_args_class(**kwargs)
    installed().resolve(record)
    return installed().resolved(record)


def test_serverargs_is_the_gate_subclass():
    from sglang.srt.entrypoints.engine import Engine
    from sglang.srt.server_args import ServerArgs

    assert ServerArgs is installed().GateServerArgs
    assert Engine.server_args_class is installed().GateServerArgs


def test_cli_flag(eagle_argv):
    args = parse(eagle_argv + [FLAG, "16", "--max-running-requests", "64"])
    assert args.speculative_disable_batch_threshold == 16
    assert args.speculative_gate_reenable_threshold == 16  # defaults to N
    assert args.speculative_gate_dwell_steps == 8
    assert args.gate_config().enabled


def test_unset_means_disabled(eagle_argv):
    args = parse(eagle_argv)
    assert args.speculative_disable_batch_threshold == 0
    assert not args.gate_config().enabled


def test_hysteresis_flags(eagle_argv):
    args = parse(eagle_argv + [FLAG, "16", "--speculative-gate-reenable-threshold", "10",
                               "--speculative-gate-dwell-steps", "0"])
    cfg = args.gate_config()
    assert (cfg.threshold, cfg.reenable_threshold, cfg.dwell_steps) == (16, 10, 0)


def test_env_applies_when_flag_absent(eagle_argv, monkeypatch):
    monkeypatch.setenv(ENV, "12")
    assert parse(eagle_argv).speculative_disable_batch_threshold == 12


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_env_means_unset(value, eagle_argv, monkeypatch):
    monkeypatch.setenv(ENV, value)  # as a compose file's ${VAR:-} leaves it
    assert parse(eagle_argv).speculative_disable_batch_threshold == 0


def test_env_leaves_a_server_that_does_not_speculate_ungated_and_says_so(model_dirs, monkeypatch, capsys):
    # An image-wide variable must not stop that image's plain servers; the flag does (below).
    monkeypatch.setenv(ENV, "8")
    args = parse(["--model-path", model_dirs[0], "--device", "cuda"])
    assert args.speculative_disable_batch_threshold == 0
    assert f"{ENV}=8 in the environment: no effect, this server does not speculate" in capsys.readouterr().err


def test_knobs_beside_an_env_threshold_on_a_server_that_does_not_speculate_say_why(model_dirs, monkeypatch,
                                                                                   capsys):
    monkeypatch.setenv(ENV, "8")
    parse(["--model-path", model_dirs[0], "--device", "cuda", "--speculative-gate-dwell-steps", "2"])
    err = capsys.readouterr().err
    assert ("--speculative-gate-dwell-steps 2: no effect, the gate is off (this server does not "
            "speculate). Drop it for such servers.") in err
    assert "unset or 0" not in err  # the environment is set: that was the old message's wrong reason


def test_env_with_a_speculation_the_gate_cannot_drive_is_refused_naming_it(model_dirs, monkeypatch, capsys):
    monkeypatch.setenv(ENV, "8")
    with pytest.raises(SystemExit) as exit_info:
        parse(["--model-path", model_dirs[0], "--device", "cuda", "--speculative-algorithm", "NGRAM"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"{ENV}=8 in the environment needs --speculative-algorithm EAGLE or EAGLE3 (got NGRAM)" in err
    assert f"or unset {ENV}." in err


def test_explicit_flag_wins_over_env(eagle_argv, monkeypatch):
    monkeypatch.setenv(ENV, "12")
    assert parse(eagle_argv + [FLAG, "20"]).speculative_disable_batch_threshold == 20
    # An explicit 0 turns the gate off even when the environment asks for it.
    assert parse(eagle_argv + [FLAG, "0"]).speculative_disable_batch_threshold == 0


def test_yaml_config(eagle_argv, tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "5")
    config = tmp_path / "server.yaml"
    config.write_text("speculative-disable-batch-threshold: 24\nspeculative-gate-dwell-steps: 3\n")
    args = parse(eagle_argv + ["--config", str(config)])
    assert args.speculative_disable_batch_threshold == 24
    assert args.speculative_gate_dwell_steps == 3
    # The command line wins over the file, as for every SGLang option.
    assert parse(eagle_argv + ["--config", str(config), FLAG, "30"]).speculative_disable_batch_threshold == 30


def engine_kwargs(model_dirs, **extra):
    target, draft = model_dirs
    return dict(
        model_path=target, device="cuda", speculative_algorithm="EAGLE3",
        speculative_draft_model_path=draft, speculative_num_steps=3,
        speculative_eagle_topk=1, speculative_num_draft_tokens=4, **extra,
    )


def test_engine_kwargs_path(model_dirs, monkeypatch):
    # sglang.Engine(**kwargs) does exactly `self.server_args_class(**kwargs)` after
    # load_plugins() (engine.py:224-235); starting the Engine itself needs a GPU.
    args = engine_args(**engine_kwargs(model_dirs, speculative_disable_batch_threshold=6))
    assert args.speculative_disable_batch_threshold == 6
    monkeypatch.setenv(ENV, "9")
    assert engine_args(**engine_kwargs(model_dirs)).speculative_disable_batch_threshold == 9


def test_pickles_to_children_intact(eagle_argv, monkeypatch):
    # Scheduler processes are spawned and receive server_args pickled (engine.py:1670), and
    # resolve nothing themselves: a value from the environment must travel with the record.
    monkeypatch.setenv(ENV, "16")
    args = parse_record(eagle_argv + ["--speculative-gate-dwell-steps", "2"])
    monkeypatch.delenv(ENV)
    clone = pickle.loads(pickle.dumps(args))
    assert type(clone) is type(args)
    assert clone.gate_config() == args.gate_config()
    assert (clone.gate_config().threshold, clone.gate_config().dwell_steps) == (16, 2)


# prepare_server_args re-configures root logging onto stderr (server_args.py:9371), so
# warnings are read from stderr rather than caplog.
def test_warns_when_threshold_can_never_fire(eagle_argv, capsys):
    parse(eagle_argv + [FLAG, "48"])  # max_running_requests defaults to 48 under spec
    err = capsys.readouterr().err
    assert f"{FLAG} 48 never fires" in err
    assert "--max-running-requests" in err


def test_warns_when_threshold_above_largest_graph(eagle_argv, capsys):
    parse(eagle_argv + [FLAG, "64", "--max-running-requests", "256", GRAPH_MAX_BS, "32"])
    err = capsys.readouterr().err
    assert "run without CUDA graphs" in err
    assert f"Raise {GRAPH_MAX_BS} to 64" in err


def test_no_graph_warning_at_the_largest_graph_batch(eagle_argv, capsys):
    parse(eagle_argv + [FLAG, "32", "--max-running-requests", "256", GRAPH_MAX_BS, "32"])
    assert "run without CUDA graphs" not in capsys.readouterr().err


def test_no_warning_for_a_reachable_threshold(eagle_argv, capsys):
    parse(eagle_argv + [FLAG, "16", "--max-running-requests", "64"])  # Triton on a CPU host
    lines = [line for line in capsys.readouterr().err.splitlines() if FLAG in line]
    assert lines == ([] if FAST_OFF_PATH_HERE else [line for line in lines if UPSTREAM_OFF_STEPS in line])


@pytest.mark.parametrize("knobs, named", [
    (["--speculative-gate-dwell-steps", "5"], "--speculative-gate-dwell-steps 5: no effect"),
    (["--speculative-gate-reenable-threshold", "4"], "--speculative-gate-reenable-threshold 4: no effect"),
    ([FLAG, "0", "--speculative-gate-dwell-steps", "2", "--speculative-gate-reenable-threshold", "1"],
     "--speculative-gate-dwell-steps 2, --speculative-gate-reenable-threshold 1: no effect"),
])
def test_warns_when_gate_knobs_are_set_with_the_gate_off(knobs, named, eagle_argv, capsys):
    args = parse(eagle_argv + knobs)
    assert args.gate_config().enabled is False
    err = capsys.readouterr().err
    assert named in err
    assert f"the gate is off ({FLAG} and {ENV} unset or 0). Set {FLAG} N" in err


@pytest.mark.skipif(installed_release() != "0.5.17", reason="0.5.17 only: 0.5.23 resolves a record once")
def test_resolved_args_resolve_again_without_a_warning(eagle_argv, capsys):
    # SGLang's Ray engine re-runs __post_init__ on resolved args (dataclasses.replace).
    import dataclasses

    for gate in ([], [FLAG, "16", "--max-running-requests", "64"]):
        args = parse_record(eagle_argv + gate)
        capsys.readouterr()
        again = dataclasses.replace(args)
        assert again.gate_config() == args.gate_config()
        assert "no effect" not in capsys.readouterr().err


@pytest.mark.parametrize("attention, fa3_switch, named", [
    (["--attention-backend", "fa3"], "0", "with --attention-backend fa3 they run"),  # Hopper's default
    (["--attention-backend", "flashinfer", "--speculative-draft-attention-backend", "fa3"], "0",
     "with --speculative-draft-attention-backend fa3 they run"),
    (["--prefill-attention-backend", "flashinfer", "--decode-attention-backend", "triton"], None,
     "--prefill-attention-backend flashinfer and --decode-attention-backend triton (hybrid)"),
    (["--prefill-attention-backend", "fa3", "--decode-attention-backend", "triton"], None,
     "--prefill-attention-backend fa3 and --decode-attention-backend triton (hybrid)"),
])
def test_warns_when_the_off_path_would_be_upstreams(attention, fa3_switch, named, eagle_argv, monkeypatch, capsys):
    if fa3_switch is not None:
        monkeypatch.setenv(FA3_OFF_PATH_ENV, fa3_switch)
    parse(eagle_argv + [FLAG, "16", "--max-running-requests", "64"] + attention)
    err = capsys.readouterr().err
    if not FAST_OFF_PATH_HERE:  # upstream's whatever the backend: the release is named instead
        assert UPSTREAM_OFF_STEPS in err and named not in err
        return
    assert named in err
    fast = "triton or flashinfer" if fa3_switch == "0" else "triton, flashinfer or fa3"
    assert f"speculation-off steps are fast on {fast} attention only" in err
    assert "Start with --attention-backend triton or flashinfer for the fast off path" in err
    # The switch is offered back where it alone would serve every setting: not a hybrid.
    assert (f"unset {FA3_OFF_PATH_ENV} (now 0) for FA3's decode path" in err) == (fa3_switch == "0")


@pytest.mark.parametrize("drafting, tree", [(["--speculative-eagle-topk", "1"], False),
                                            (["--speculative-num-steps", "5", "--speculative-eagle-topk", "4",
                                              "--speculative-num-draft-tokens", "8", "--page-size", "1"], True)],
                         ids=["chain", "tree"])
@pytest.mark.parametrize("fa3_switch", [None, "1", "0"])
def test_fa3_is_fast_for_chains_and_trees_unless_switched_off(drafting, tree, fa3_switch, eagle_argv, monkeypatch,
                                                              capsys):
    """FA3 counts as a fast-off-path backend (one_token_decode converts it) unless
    SGLANG_SPEC_GATE_FA3_OFF_PATH=0; then a chain warns and a tree is refused, naming the backend."""
    if fa3_switch is not None:
        monkeypatch.setenv(FA3_OFF_PATH_ENV, fa3_switch)
    argv = eagle_argv + [FLAG, "16", "--max-running-requests", "64", "--attention-backend", "fa3"] + drafting
    if not FAST_OFF_PATH_HERE:
        pytest.skip("no fast off path on this SGLang release: every backend runs upstream's steps-0 state")
    if fa3_switch == "0" and tree:
        with pytest.raises(SystemExit):
            parse(argv)
        assert "tree drafting with --attention-backend fa3" in capsys.readouterr().err
        return
    parse(argv)
    assert ("fast off path" in capsys.readouterr().err) == (fa3_switch == "0")


@pytest.mark.parametrize("backend", ["triton", "flashinfer"])
def test_no_off_path_warning_on_a_verified_backend(backend, eagle_argv, capsys):
    parse(eagle_argv + [FLAG, "16", "--max-running-requests", "64", "--attention-backend", backend,
                        "--speculative-draft-attention-backend", backend])
    err = capsys.readouterr().err
    if FAST_OFF_PATH_HERE:
        assert "fast off path" not in err
    else:
        assert (f"{FLAG} 16: {UPSTREAM_OFF_STEPS}: the gate's fast off path has not run on a GPU with this "
                "release, so it stays off") in err and "For the fast off path use SGLang 0.5.17." in err


# (name, argv after the EAGLE-3 configuration, env value, substrings the error must contain)
BAD_CLI = [
    ("negative", [FLAG, "-1"], None, [FLAG, ">= 0"]),
    ("not a number", [FLAG, "abc"], None, [FLAG, "non-negative integer", "'abc'"]),
    ("fraction", [FLAG, "2.5"], None, [FLAG, "non-negative integer"]),
    ("empty", [FLAG, ""], None, [FLAG, "non-negative integer"]),
    ("negative dwell", [FLAG, "8", "--speculative-gate-dwell-steps", "-3"], None,
     ["--speculative-gate-dwell-steps", ">= 0"]),
    ("re-enable above threshold", [FLAG, "8", "--speculative-gate-reenable-threshold", "9"], None,
     ["--speculative-gate-reenable-threshold 9", "must be from 1 to the threshold", f"{FLAG} 8"]),
    # Batches never fall to 0 requests: speculation would be off for good, silently.
    ("re-enable at 0", [FLAG, "8", "--speculative-gate-reenable-threshold", "0"], None,
     ["--speculative-gate-reenable-threshold 0", "must be from 1 to the threshold", "leave it unset"]),
    ("garbage env", [], "lots", [ENV, "non-negative integer", "'lots'"]),
    ("negative env", [], "-4", [ENV, ">= 0"]),
    ("float env", [], "1e3", [ENV, "non-negative integer"]),
    ("doubled sign env", [], "+-5", [ENV, "non-negative integer", "'+-5'"]),
    ("superscript env", [], "\u00b2", [ENV, "non-negative integer"]),
    # Errors about a threshold from the environment name the variable, not a flag never passed.
    ("env re-enable above threshold", ["--speculative-gate-reenable-threshold", "9"], "8",
     [f"the threshold ({ENV}=8 in the environment)", "must be from 1"]),
    ("env with dp attention", DP_ATTENTION, "8",
     [f"{ENV}=8 in the environment cannot be combined with {DP_ATTENTION_FLAG}",
      f"unset {ENV} to run without the gate"]),
    ("dp attention", [FLAG, "8", *DP_ATTENTION], None,
     [FLAG, DP_ATTENTION_FLAG, "Change one of the two", f"drop {FLAG} to run without the gate"]),
    ("pipeline parallel", [FLAG, "8", "--pp-size", "2"], None, [FLAG, "--pp-size"]),
    ("two-batch overlap", [FLAG, "8", "--enable-two-batch-overlap"], None, [FLAG, "--enable-two-batch-overlap"]),
    ("pdmux", [FLAG, "8", "--enable-pdmux"], None, [FLAG, "--enable-pdmux"]),
    ("lora", [FLAG, "8", "--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "q_proj"],
     None, [FLAG, "--enable-lora"]),
    ("multi-layer eagle", [FLAG, "8", "--enable-multi-layer-eagle"], None, [FLAG, "--enable-multi-layer-eagle"]),
    ("with upstream adaptive", [FLAG, "8", "--speculative-adaptive"], None, [FLAG, "--speculative-adaptive"]),
    ("no draft steps", [FLAG, "8", "--speculative-num-steps", "0", "--speculative-num-draft-tokens", "1"], None,
     [FLAG, "--speculative-num-steps 0", "no speculation to turn off"]),
    # Plain steps' verify input has no draft_probs: SGLang's rejection sampler raises on them.
    ("rejection sampling", [FLAG, "8", "--speculative-use-rejection-sampling"], None,
     [FLAG, "--speculative-use-rejection-sampling", "draft's token distribution"]),
    # --speculative-disable-batch-threshold auto
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
]


@pytest.mark.parametrize("name, extra, env, expected", BAD_CLI, ids=[c[0] for c in BAD_CLI])
def test_bad_cli_input_exits_2_with_clear_message(name, extra, env, expected, eagle_argv, monkeypatch, capsys):
    if env is not None:
        monkeypatch.setenv(ENV, env)
    with pytest.raises(SystemExit) as exit_info:
        parse(eagle_argv + extra)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err, f"{text!r} missing from: {err}"
    assert "Traceback" not in err


# The gate's 1/0 environment switches: the args function reading each, and what its default does.
SWITCHES = {HOST_SEQ_LENS_ENV: ("host_seq_lens_enabled", "1 (FlashInfer plain steps plan on the gate's host "
                                "lengths, the default)"),
            FA3_OFF_PATH_ENV: ("fa3_off_path_enabled", "1 (FA3's off steps run its decode path, the default)")}


@pytest.mark.parametrize("env, value, enabled", [
    (HOST_SEQ_LENS_ENV, None, True), (HOST_SEQ_LENS_ENV, "1", True), (HOST_SEQ_LENS_ENV, " TRUE ", True),
    (HOST_SEQ_LENS_ENV, "yes", True), (HOST_SEQ_LENS_ENV, "0", False), (HOST_SEQ_LENS_ENV, "off", False),
    (FA3_OFF_PATH_ENV, None, True), (FA3_OFF_PATH_ENV, "", True), (FA3_OFF_PATH_ENV, "1", True),
    (FA3_OFF_PATH_ENV, " on ", True), (FA3_OFF_PATH_ENV, "0", False)])
def test_switches_read_1_or_0_and_their_default_when_unset(env, value, enabled, eagle_argv, monkeypatch):
    from sglang_specgate import args

    if value is not None:
        monkeypatch.setenv(env, value)
    parse(eagle_argv + [FLAG, "8"])  # accepted at start-up
    assert getattr(args, SWITCHES[env][0])() is enabled


@pytest.mark.parametrize("env", SWITCHES)
@pytest.mark.parametrize("value", ["2", "maybe", "1.0"])
def test_garbage_in_a_switch_exits_2_naming_it(env, value, eagle_argv, monkeypatch, capsys):
    monkeypatch.setenv(env, value)
    with pytest.raises(SystemExit) as exit_info:
        parse(eagle_argv + [FLAG, "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert env in err and repr(value) in err and SWITCHES[env][1] in err, err
    assert "Set it to 1 or 0, or unset it" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, expected", [
    (["--speculative-disable-batch-threshold", "8"], "needs --speculative-algorithm EAGLE or EAGLE3 (got None)"),
    (["--speculative-algorithm", "NGRAM", "--speculative-disable-batch-threshold", "8"], "(got NGRAM)"),
], ids=["no speculation", "ngram"])
def test_threshold_without_eagle(argv, expected, model_dirs, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse(["--model-path", model_dirs[0], "--device", "cuda", *argv])
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("kwarg, flag", [
    ("speculative_gate_dwell_steps", "--speculative-gate-dwell-steps"),
    ("speculative_gate_reenable_threshold", "--speculative-gate-reenable-threshold"),
])
def test_bad_knob_engine_kwarg_raises_error_naming_it(kwarg, flag, model_dirs):
    # Engine kwargs skip argparse's type check: the resolution itself must name the knob.
    from sglang_specgate.args import SpecGateConfigError

    with pytest.raises(SpecGateConfigError, match=f"{flag} must be >= 0"):
        engine_args(**engine_kwargs(model_dirs, speculative_disable_batch_threshold=8, **{kwarg: -1}))


@pytest.mark.parametrize("value", ["8x", -2, 2.0, True, None.__class__])
def test_bad_engine_kwarg_raises_named_error(value, model_dirs):
    from sglang_specgate.args import SpecGateConfigError

    with pytest.raises(SpecGateConfigError, match="--speculative-disable-batch-threshold"):
        engine_args(**engine_kwargs(model_dirs, speculative_disable_batch_threshold=value))
