"""The plan of a gated server's CUDA graphs and KV reservation (graph_plan.py), from resolved args
as SGLang's real argument machinery leaves them; the reservation against upstream's own sizing."""

from __future__ import annotations

import pytest
from test_args import FLAG, parse, parse_record

from sglang_specgate.deferred_draft_kv import MIN_WRITE_ROWS
from sglang_specgate.drafting import Drafting, drafting_of
from sglang_specgate.graph_plan import (DRAFT_DECODE, DRAFT_EXTEND, TARGET_VERIFY, decode_graph_sizes, described,
                                        graph_plan)

pytestmark = pytest.mark.usefixtures("plugins_loaded", "clean_env")

TREE = Drafting(num_steps=5, topk=4, num_draft_tokens=8)
SIZES = (1, 2, 4, 8)


def graph(runner, sizes, tokens, forwards=1):
    return {"runner": runner, "batch_sizes": list(sizes), "tokens_per_request": tokens, "forwards": forwards}


def test_a_tree_servers_states():
    plan = graph_plan(TREE, SIZES, (0, 5), deferred_writes=True)
    # 2·max(S·K, D) = 2·max(20, 8): each decode step's reservation, off steps' too.
    assert plan["kv_reserved_tokens_per_request"] == 40
    assert plan["states"] == [
        {"draft_steps": 5, "graphs": [graph(TARGET_VERIFY, SIZES, 8), graph(DRAFT_DECODE, SIZES, 4, forwards=4),
                                      graph(DRAFT_EXTEND, SIZES, 8)]},
        # The write graph takes up to D = 8 decode batches of 8, then doubles up to a prompt's rows.
        {"draft_steps": 0, "graphs": [graph(TARGET_VERIFY, SIZES, 1), graph(
            DRAFT_EXTEND, [*SIZES, 16, 24, 32, 40, 48, 56, 64, 128, 256, 512, MIN_WRITE_ROWS], 1)]},
    ]


def test_a_chain_servers_auto_candidates():
    plan = graph_plan(Drafting(3, 1, 4), SIZES, (0, 1, 2, 3), deferred_writes=False)
    assert plan["kv_reserved_tokens_per_request"] == 8
    steps = {state["draft_steps"]: state["graphs"] for state in plan["states"]}
    assert steps[3] == [graph(TARGET_VERIFY, SIZES, 4), graph(DRAFT_DECODE, SIZES, 1, forwards=2),
                        graph(DRAFT_EXTEND, SIZES, 4)]
    assert steps[2] == [graph(TARGET_VERIFY, SIZES, 3), graph(DRAFT_DECODE, SIZES, 1), graph(DRAFT_EXTEND, SIZES, 3)]
    assert steps[1] == [graph(TARGET_VERIFY, SIZES, 2), graph(DRAFT_EXTEND, SIZES, 2)]  # no draft decode at 1 step
    assert steps[0] == [graph(TARGET_VERIFY, SIZES, 1), graph(DRAFT_EXTEND, SIZES, 1)]  # no buffered writes


def test_described_a_line_a_state():
    assert described(graph_plan(TREE, SIZES, (0, 5), deferred_writes=False)) == [
        "draft steps 5: target verify at 4 batch sizes 1..8, 8 tokens a request; draft decode at 4 batch sizes "
        "1..8, 4 tokens a request x 4 forwards; draft extend at 4 batch sizes 1..8, 8 tokens a request",
        "draft steps 0: target verify at 4 batch sizes 1..8, 1 token a request; draft extend at 4 batch sizes "
        "1..8, 1 token a request",
    ]
    assert described(graph_plan(TREE, (), (0, 5), deferred_writes=True)) == [
        "draft steps 5: no CUDA graphs", "draft steps 0: no CUDA graphs"]


@pytest.mark.parametrize("extra, sizes", [
    (["--max-running-requests", "16"], (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16)),
    (["--max-running-requests", "15"], (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 15)),  # the pool's own size added
    (["--max-running-requests", "16", "--disable-cuda-graph"], ()),
    (["--max-running-requests", "16", "--cuda-graph-backend-decode", "disabled"], ()),
])
def test_the_decode_graph_sizes_of_resolved_args(extra, sizes, eagle_argv):
    assert decode_graph_sizes(parse(eagle_argv + extra)) == sizes


@pytest.mark.parametrize("drafting", [
    ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
    ["--speculative-num-steps", "5", "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8"],
    ["--speculative-num-steps", "2", "--speculative-eagle-topk", "8", "--speculative-num-draft-tokens", "32"],
], ids=["chain", "tree 5,4,8", "tree 2,8,32"])
def test_the_reservation_is_upstreams(drafting, model_dirs):
    """Upstream's own sizing (allocation_sizing.py), for resolved args published as a scheduler's
    are (0.5.23 reads them from the runtime context); the gate is off: only the drafting counts."""
    import inspect

    from sglang.srt.mem_cache.allocation_sizing import get_alloc_reserve_per_decode
    from sglang.srt.runtime_context import publish, reset_context

    from sglang_specgate.sglang_versions import installed

    target, draft = model_dirs
    record = parse_record(["--model-path", target, "--device", "cuda", "--speculative-algorithm", "EAGLE3",
                           "--speculative-draft-model-path", draft, *drafting])
    args = installed().resolved(record)
    plan = graph_plan(drafting_of(args), SIZES, (0, args.speculative_num_steps), deferred_writes=True)
    publish(record, role="test")
    try:
        takes_args = "server_args" in inspect.signature(get_alloc_reserve_per_decode).parameters  # 0.5.17
        upstream = get_alloc_reserve_per_decode(record) if takes_args else get_alloc_reserve_per_decode()
    finally:
        reset_context()
    assert plan["kv_reserved_tokens_per_request"] == upstream


def test_the_plan_of_a_gated_tree_servers_resolved_args(eagle_argv):
    from sglang_specgate.sglang_versions import FAST_OFF_PATH_RELEASES, installed_release

    if installed_release() not in FAST_OFF_PATH_RELEASES:
        pytest.skip(f"trees are refused on SGLang {installed_release()}")
    args = parse(eagle_argv + ["--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8", FLAG, "8",
                               "--max-running-requests", "8"])
    plan = graph_plan(drafting_of(args), decode_graph_sizes(args), (0, 3), deferred_writes=True)
    assert plan["states"][0]["graphs"][0] == graph(TARGET_VERIFY, range(1, 9), 8)
    assert plan["kv_reserved_tokens_per_request"] == 24  # 2·max(3·4, 8)
