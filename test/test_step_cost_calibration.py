"""The auto gate's start-up calibration: which graphs a step replays at which size, the order
they are timed in, rank 0's table on every rank, and the SGLang names it reads. Graphs and CUDA
events need a GPU, so stand-in graphs count their replays and a stand-in timer adds up costs
per graph; the keys, states and runners' key functions are SGLang's own."""

from __future__ import annotations

import inspect
import json
from types import SimpleNamespace

import pytest
from sglang.srt.model_executor.runner.shape_key import ShapeKey
from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState
from spawned_ranks import broadcast_from_rank0, join_group, run_ranks

from sglang_specgate.step_cost_calibration import (STATE_RUNNERS, CalibrationError, calibrate,
                                                   measure_step_costs, runner_graphs, step_replays)


class Graph:
    def __init__(self, name: str, cost: float, replayed: list):
        self.name, self.cost, self._replayed = name, cost, replayed

    def replay(self):
        self._replayed.append(self.name)


def runner(name, sizes, cost_per_request, replayed, extra_keys=()):
    graphs = {ShapeKey(size=b): Graph(f"{name}@{b}", cost_per_request * b, replayed) for b in sizes}
    graphs.update({key: Graph(f"{name}@other", 1e9, replayed) for key in extra_keys})
    return SimpleNamespace(backend=SimpleNamespace(_graphs=graphs))


def state(steps, sizes, replayed, draft_sizes=None):
    """A runtime state as SGLang's dataclass holds it: a draft decode runner for k >= 2 only."""
    return SpecRuntimeState(
        speculative_num_steps=steps, speculative_num_draft_tokens=steps + 1,
        draft_attn_backend=None, target_attn_backend=None, draft_extend_attn_backend=None,
        cuda_graph_runner=runner(f"draft{steps}", draft_sizes or sizes, steps, replayed) if steps >= 2 else None,
        target_graph_runner=runner(f"target{steps}", sizes, 10 + steps, replayed),
        cuda_graph_runner_for_draft_extend=runner(f"extend{steps}", sizes, 1, replayed),
    )


def summed_cost(graph_by_replay):
    """A timer for stand-in graphs: it replays a pass once, which costs the sum of its graphs'
    costs."""
    def time_replays(replays):
        for replay in replays:
            replay()
        return sum(graph_by_replay[r].cost for r in replays)
    return time_replays


def graphs_of(states):
    return {graph.replay: graph for s in states.values() for name in STATE_RUNNERS
            if getattr(s, name) is not None for graph in getattr(s, name).backend._graphs.values()}


def test_a_step_replays_each_runners_graph_at_the_size_its_batch_pads_to():
    replayed = []
    states = {0: state(0, [1, 2, 4, 8], replayed), 3: state(3, [1, 2, 4, 8], replayed, draft_sizes=[1, 4, 8])}
    sizes, replays = step_replays(states)
    assert sizes == [1, 2, 4, 8]
    for step in replays[3][2]:
        step()
    # The draft decode runner captured no graph at 2: its batch pads up to 4, as in a real step.
    assert replayed == ["draft3@4", "target3@2", "extend3@2"]
    replayed.clear()
    for step in replays[0][8]:
        step()
    assert replayed == ["target0@8", "extend0@8"]  # k = 0 and 1 run no draft decode


def test_sizes_are_those_every_states_target_captured():
    replayed = []
    states = {0: state(0, [1, 2, 4, 8, 16], replayed), 1: state(1, [1, 4, 8], replayed)}
    assert step_replays(states)[0] == [1, 4, 8]


def test_other_streams_and_variants_are_not_a_steps_graphs():
    graphs = runner("target", [1, 2], 1, [], extra_keys=[ShapeKey(size=4, stream_idx=1),
                                                         ShapeKey(size=8, variant_label="lora")])
    assert sorted(runner_graphs(graphs)) == [1, 2]


def test_costs_are_timed_size_by_size_with_every_k_in_turn():
    replayed = []
    states = {k: state(k, [1, 2, 4], replayed) for k in (0, 1, 3)}
    sizes, replays = step_replays(states)
    timed = []
    cost = summed_cost(graphs_of(states))

    def time_replays(passes):
        timed.append(passes)
        return cost(passes)

    table = measure_step_costs(sizes, replays, time_replays)
    assert [p for p in timed] == [replays[k][b] for b in sizes for k in (0, 1, 3)]
    assert table.batch_sizes == (1, 2, 4)
    # target (10 + k) * b + extend b, and for k = 3 the draft 3 * b
    assert table.costs == {0: (11.0, 22.0, 44.0), 1: (12.0, 24.0, 48.0), 3: (17.0, 34.0, 68.0)}


@pytest.mark.parametrize("states, message", [
    (lambda r: {0: state(0, [1, 2], r), 1: state(1, [4, 8], r)}, "share no captured target batch size"),
    (lambda r: {0: state(0, [1, 2, 8], r), 3: state(3, [1, 2, 8], r, draft_sizes=[1, 2])},
     "the 3-step state captured no graph for decode batches of 8"),
])
def test_states_that_cannot_be_measured_say_why(states, message):
    with pytest.raises(CalibrationError, match=message):
        step_replays(states([]))


def test_a_backend_without_full_graphs_is_named():
    breakable = SimpleNamespace(backend=SimpleNamespace())
    with pytest.raises(CalibrationError, match="holds no full CUDA graphs"):
        runner_graphs(breakable)


def test_every_rank_takes_rank_0s_table():
    replayed = []
    states = {k: state(k, [1, 2], replayed) for k in (0, 3)}
    sent = []

    def rank0_sends_its_own(text):
        sent.append(text)
        return json.dumps({"batch_sizes": [1, 2], "costs": {"0": [1.0, 2.0], "3": [5.0, 6.0]}})

    table = calibrate(states, rank0_sends_its_own, time_replays=summed_cost(graphs_of(states)))
    assert json.loads(sent[0])["costs"]["3"] == [17.0, 34.0]  # this rank's own measurement went out
    assert table.costs == {0: (1.0, 2.0), 3: (5.0, 6.0)}  # and rank 0's came back


def _rank(rank: int, world_size: int, port: int, results) -> None:
    """One tensor-parallel rank: its own (different) clock, the table from rank 0 over gloo."""
    import torch.distributed as dist

    join_group(rank, world_size, port)
    replayed = []
    states = {k: state(k, [1, 2, 4], replayed) for k in (0, 1, 3)}
    cost = summed_cost(graphs_of(states))
    table = calibrate(states, broadcast_from_rank0, time_replays=lambda p: cost(p) * (1 + rank))
    results.put((rank, (table.to_json(), replayed)))
    dist.destroy_process_group()


def test_two_ranks_replay_the_same_graphs_and_hold_rank_0s_table():
    results = run_ranks(_rank)
    assert results[0][0] == results[1][0]  # rank 1 measured twice rank 0's costs, and decides on rank 0's
    assert json.loads(results[0][0])["costs"]["0"] == [11.0, 22.0, 44.0]
    # The same graphs in the same order on both ranks: the target's hold the collectives.
    assert results[0][1] == results[1][1] and len(results[0][1]) == 3 * 3 * 2 + 3
    assert results[0][1][:5] == ["target0@1", "extend0@1", "target1@1", "extend1@1", "draft3@1"]


def test_the_sglang_names_calibration_reads():
    """Upstream's full-graph backend keeps its graphs in ``_graphs`` keyed by ShapeKey and
    replays them with ``.replay()``; the decode runners key a batch size as ShapeKey(size=bs)
    (decode_cuda_graph_runner.py:449, eagle_draft_cuda_graph_runner.py:287,
    eagle_draft_extend_cuda_graph_runner.py:282); SpecRuntimeState names the three runners."""
    from sglang.srt.model_executor.runner.decode_cuda_graph_runner import DecodeCudaGraphRunner
    from sglang.srt.model_executor.runner_backend.full_cuda_graph_backend import FullCudaGraphBackend
    from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner
    from sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner import EAGLEDraftExtendCudaGraphRunner

    assert "self._graphs[shape_key].replay()" in inspect.getsource(FullCudaGraphBackend.replay)
    assert "self._graphs" in inspect.getsource(FullCudaGraphBackend.__init__)
    for cls in (DecodeCudaGraphRunner, EAGLEDraftCudaGraphRunner, EAGLEDraftExtendCudaGraphRunner):
        assert cls._make_graph_key(None, 8) == ShapeKey(size=8)
    assert set(STATE_RUNNERS) <= {f.name for f in SpecRuntimeState.__dataclass_fields__.values()}
