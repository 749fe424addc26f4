"""Tree drafting (--speculative-eagle-topk K > 1) under the gate, through SGLang's real argument
machinery on the installed release: which trees it runs, SGLang's own choice of one, every refusal
with its flag and fix, and the auto gate's candidates with a tree. On a release whose fast off
path has not run on a GPU (0.5.23) every tree is refused, for that reason first."""

from __future__ import annotations

import pickle

import pytest
import torch
from test_args import CANDIDATES, ENV, FLAG, engine_args, engine_kwargs, parse, parse_record

from sglang_specgate.args import SpecGateConfigError, auto_gate_config
from sglang_specgate.drafting import CHAIN_FLAGS, Drafting, drafting_of, tree_refusal
from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed, installed_release

pytestmark = pytest.mark.usefixtures("plugins_loaded", "clean_env")

TREES_HERE = installed_release() in FAST_OFF_PATH_RELEASES
TREE = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"]
NOT_ON_THIS_RELEASE = (f"tree drafting needs the gate's fast off path, which has not run on a GPU with SGLang "
                       f"{installed_release()}")
SGLANG_CHOSE = ("SGLang chose --speculative-num-steps 5 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8 "
                "for this model, as none of them was given")


@pytest.fixture
def eagle3_without_drafting(model_dirs) -> list[str]:
    """The EAGLE-3 flags users start from: no drafting parameter, so SGLang picks them, a tree
    for a Llama target (5, 4, 8; speculative_hook.py _auto_choose_speculative_params)."""
    target, draft = model_dirs
    return ["--model-path", target, "--device", "cuda", "--speculative-algorithm", "EAGLE3",
            "--speculative-draft-model-path", draft]


def refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        parse(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# FA3: what SGLang picks on Hopper when no backend is given (server_args.py:3537), here given.
@pytest.mark.parametrize("backend", ["triton", "flashinfer", "fa3"])
def test_a_tree_sglang_chose_runs_where_the_gate_runs_trees(backend, eagle3_without_drafting, capsys):
    argv = eagle3_without_drafting + [FLAG, "8", "--attention-backend", backend]
    if not TREES_HERE:
        err = refused(argv, capsys)
        assert f"{FLAG} 8: {SGLANG_CHOSE}; {NOT_ON_THIS_RELEASE}" in err
        assert f"Use SGLang 0.5.17, or chain drafting: {CHAIN_FLAGS}." in err
        return
    args = parse(argv)
    assert drafting_of(args) == Drafting(num_steps=5, topk=4, num_draft_tokens=8, chosen_by="sglang")
    assert drafting_of(args).snapshot() == {"shape": "tree", "topk": 4, "num_steps": 5, "num_draft_tokens": 8,
                                            "chosen_by": "sglang"}
    assert "tree drafting" not in capsys.readouterr().err


@pytest.mark.parametrize("gate", [[], [FLAG, "8"]], ids=["gate off", "gate on"])
def test_who_chose_the_drafting_travels_with_the_record(gate, eagle3_without_drafting, eagle_argv):
    # Scheduler processes receive the record pickled; /server_info reports who chose.
    if gate and not TREES_HERE:
        pytest.skip(f"trees are refused on SGLang {installed_release()}")
    chosen = pickle.loads(pickle.dumps(parse_record(eagle3_without_drafting + gate)))
    assert drafting_of(installed().resolved(chosen)).chosen_by == "sglang"
    given = pickle.loads(pickle.dumps(parse_record(eagle_argv + gate)))
    assert drafting_of(installed().resolved(given)) == Drafting(3, 1, 4, "user")


def test_a_tree_given_as_flags_and_as_engine_kwargs(eagle_argv, model_dirs, capsys):
    kwargs = {**engine_kwargs(model_dirs, speculative_disable_batch_threshold=8), "speculative_eagle_topk": 4,
              "speculative_num_draft_tokens": 8}
    if not TREES_HERE:
        assert NOT_ON_THIS_RELEASE in refused(eagle_argv + TREE + [FLAG, "8"], capsys)
        with pytest.raises(SpecGateConfigError, match="tree drafting needs the gate's fast off path"):
            engine_args(**kwargs)
        return
    assert drafting_of(parse(eagle_argv + TREE + [FLAG, "8"])) == Drafting(3, 4, 8, "user")
    assert drafting_of(engine_args(**kwargs)) == Drafting(3, 4, 8, "user")


# (name, argv after the EAGLE-3 chain configuration, env value, substrings the error must contain
# where the gate runs trees; elsewhere the release's refusal comes first)
BAD_TREES = [
    ("too many draft tokens", [FLAG, "8", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "38"],
     None, ["--speculative-num-draft-tokens 38 must be from 2 to 37 with --speculative-num-steps 3 "
            "--speculative-eagle-topk 4", "Give D in that range"]),
    ("pages", [FLAG, "8", *TREE, "--page-size", "16"], None,
     ["tree drafting with --page-size 16", "Use --page-size 1, or chain drafting"]),
    ("a backend without the fast off path", [FLAG, "8", *TREE, "--attention-backend", "torch_native"], None,
     ["got --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 8",
      "tree drafting with --attention-backend torch_native: the gate's off steps are fast on triton, flashinfer "
      "or fa3 attention only", "Start with --attention-backend triton or flashinfer or fa3 (the draft's likewise)"]),
    ("draft on it", [FLAG, "8", *TREE, "--attention-backend", "flashinfer",
                     "--speculative-draft-attention-backend", "torch_native"], None,
     ["tree drafting with --speculative-draft-attention-backend torch_native"]),
    ("hybrid", [FLAG, "8", *TREE, "--prefill-attention-backend", "flashinfer", "--decode-attention-backend",
                "triton"], None,
     ["--prefill-attention-backend flashinfer and --decode-attention-backend triton (hybrid)"]),
    ("env threshold", [*TREE, "--page-size", "16"], "8",
     [f"{ENV}=8 in the environment: got --speculative-num-steps 3", "tree drafting with --page-size 16"]),
    ("auto with chain candidates", [FLAG, "auto", *TREE, CANDIDATES, "0,1,3"], None,
     [f"{CANDIDATES} 0,1,3 with tree drafting (--speculative-num-steps 3 --speculative-eagle-topk 4 "
      f"--speculative-num-draft-tokens 8): {FLAG} auto chooses between plain and the tree only, 0 and 3",
      f"Drop {CANDIDATES}, or for finer steps use chain drafting: {CHAIN_FLAGS}."]),
    ("auto with fewer steps", [FLAG, "auto", *TREE, CANDIDATES, "0,2"], None, [f"{CANDIDATES} 0,2 with tree drafting"]),
]


@pytest.mark.parametrize("name, extra, env, expected", BAD_TREES, ids=[c[0] for c in BAD_TREES])
def test_a_tree_the_gate_cannot_run_is_refused_naming_the_flag_and_the_fix(name, extra, env, expected, eagle_argv,
                                                                           monkeypatch, capsys):
    if env is not None:
        monkeypatch.setenv(ENV, env)
    err = refused(eagle_argv + extra, capsys)
    for text in (expected if TREES_HERE else [NOT_ON_THIS_RELEASE]):
        assert text in err, f"{text!r} missing from: {err}"
    assert f"chain drafting: {CHAIN_FLAGS}." in err or "Drop --speculative-gate-candidate-steps" in err


@pytest.mark.skipif(not TREES_HERE, reason=f"trees are refused on SGLang {installed_release()}")
def test_a_tree_sglang_chose_on_a_backend_without_the_fast_off_path_names_its_choice(eagle3_without_drafting,
                                                                                     monkeypatch, capsys):
    monkeypatch.setenv("SGLANG_SPEC_GATE_FA3_OFF_PATH", "0")  # FA3 on upstream's kernels
    err = refused(eagle3_without_drafting + [FLAG, "8", "--attention-backend", "fa3"], capsys)
    assert f"{FLAG} 8: {SGLANG_CHOSE}; tree drafting with --attention-backend fa3" in err
    assert f"Start with --attention-backend triton or flashinfer (the draft's likewise), or chain drafting: " \
           f"{CHAIN_FLAGS}." in err


@pytest.mark.skipif(not TREES_HERE, reason=f"trees are refused on SGLang {installed_release()}")
@pytest.mark.parametrize("candidates, expected", [([], (0, 3)), ([CANDIDATES, "3,0"], (0, 3))])
def test_the_auto_gate_with_a_tree_chooses_between_plain_and_the_tree(candidates, expected, eagle_argv):
    assert auto_gate_config(parse(eagle_argv + TREE + [FLAG, "auto", *candidates])).candidates == expected


def test_chains_keep_every_step_count_as_auto_candidates(eagle_argv):
    assert auto_gate_config(parse(eagle_argv + [FLAG, "auto"])).candidates == (0, 1, 2, 3)


@pytest.mark.parametrize("steps, topk", [(1, 2), (3, 4), (5, 4), (5, 8)])
def test_the_draft_token_bound_is_what_upstreams_tree_can_hold(steps, topk):
    """organize_draft_results (SGLang's own, on the CPU) keeps D - 1 of the scores the draft
    steps produce (select_top_k_tokens' shapes: (b, 1, K), then (b, K, K) a step): the bound's D
    works, one more fails."""
    from sglang.srt.speculative.eagle_utils import organize_draft_results

    bs, most = 2, Drafting(steps, topk, 0).max_draft_tokens
    scores = [torch.rand(bs, 1, topk)] + [torch.rand(bs, topk, topk) for _ in range(steps - 1)]
    tokens = [torch.randint(0, 100, (bs, topk))] + [torch.randint(0, 100, (bs, topk * topk))
                                                    for _ in range(steps - 1)]
    parents = [torch.zeros(bs, topk + 1, dtype=torch.long)] + [torch.zeros(bs, topk, dtype=torch.long)
                                                               for _ in range(steps - 1)]
    _, _, drafted = organize_draft_results(scores, tokens, parents, most)
    assert drafted.shape == (bs, most - 1)
    with pytest.raises(RuntimeError):
        organize_draft_results(scores, tokens, parents, most + 1)


@pytest.mark.parametrize("release, page_size, slow, expected", [
    ("0.5.17", 1, [], None),
    ("0.5.23", 1, [], "has not run on a GPU with SGLang 0.5.23"),
    ("0.5.17", 64, [], "--page-size 64"),
    ("0.5.17", 1, ["--attention-backend fa3"], "tree drafting with --attention-backend fa3"),
    ("0.5.23", 64, ["--attention-backend fa3"], "has not run on a GPU with SGLang 0.5.23"),  # the release first
])
def test_tree_refusal_rules(release, page_size, slow, expected):
    refusal = tree_refusal(Drafting(5, 4, 8), release=release, fast_off_path_releases=("0.5.17",),
                           page_size=page_size, slow_backends=slow, fast_backends=("triton", "flashinfer"))
    assert refusal is None if expected is None else expected in refusal


@pytest.mark.parametrize("tokens", [1, 38])
def test_tree_refusal_bounds_the_draft_tokens(tokens):
    refusal = tree_refusal(Drafting(3, 4, tokens), release="0.5.17", fast_off_path_releases=("0.5.17",),
                           page_size=1, slow_backends=[], fast_backends=("triton", "flashinfer"))
    assert f"--speculative-num-draft-tokens {tokens} must be from 2 to 37" in refusal
