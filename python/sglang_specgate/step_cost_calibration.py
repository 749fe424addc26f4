"""The auto gate's cost table t(k, b), measured at start-up from the captured CUDA graphs.

A decode step with k draft steps replays, at the size its batch pads up to, the graphs of its
runtime state's runners: draft decode (k >= 2), target verify and draft extend. Calibration
replays those graphs at every decode batch size the target captured and times them. Every rank
replays the same graphs in the same order, since the target's graphs hold the tensor-parallel
collectives; rank 0 times them and broadcasts its table in its canonical JSON form, so every
rank decides from the same numbers and never from its own clock.

What the table leaves out: the host's time per step, which the overlap scheduler hides behind
the GPU's, and the context length: graphs replay with the inputs they were captured with.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence

from sglang_specgate.step_costs import StepCostTable

# SpecRuntimeState's graph runners, in the order a decode step runs them.
STATE_RUNNERS = ("cuda_graph_runner", "target_graph_runner", "cuda_graph_runner_for_draft_extend")
WARMUP_REPLAYS = 2
TIMED_REPLAYS = 5

Replay = Callable[[], None]


class CalibrationError(RuntimeError):
    """The captured states cannot be measured; the message says why and what to change."""


def runner_graphs(runner) -> dict[int, Replay]:
    """Batch size -> the replay of a runner's graph for it. Reads the full CUDA-graph backend's
    graphs (runner_backend/full_cuda_graph_backend.py), keyed by ShapeKey(size=bs) for decode
    runners; none for a runner that is not there (k < 2 has no draft decode)."""
    if runner is None:
        return {}
    graphs = getattr(getattr(runner, "backend", None), "_graphs", None)
    if not isinstance(graphs, Mapping):
        raise CalibrationError(
            f"{type(runner).__name__} holds no full CUDA graphs to replay (its backend is "
            f"{type(getattr(runner, 'backend', None)).__name__})")
    return {key.size: graph.replay for key, graph in graphs.items()
            if key.stream_idx is None and key.variant_label is None}


def step_replays(states: Mapping[int, object]) -> tuple[list[int], dict[int, dict[int, list[Replay]]]]:
    """The decode batch sizes every state's target captured, and per draft step count k and
    size b the replays of one step: each runner's graph for the size b pads up to."""
    graphs = {k: [runner_graphs(getattr(state, name)) for name in STATE_RUNNERS]
              for k, state in states.items()}
    target_sizes = [set(by_runner[1]) for by_runner in graphs.values()]
    sizes = sorted(set.intersection(*target_sizes)) if target_sizes else []
    if not sizes:
        raise CalibrationError("the runtime states share no captured target batch size")
    replays = {k: {b: [_padded(runner, b, k) for runner in by_runner if runner] for b in sizes}
               for k, by_runner in graphs.items()}
    return sizes, replays


def _padded(graphs: dict[int, Replay], batch_size: int, steps: int) -> Replay:
    sizes = sorted(graphs)
    i = bisect_left(sizes, batch_size)
    if i == len(sizes):
        raise CalibrationError(
            f"the {steps}-step state captured no graph for decode batches of {batch_size}")
    return graphs[sizes[i]]


def measure_step_costs(sizes: Sequence[int], replays: Mapping[int, Mapping[int, Sequence[Replay]]],
                       time_replays: Callable[[Sequence[Replay]], float]) -> StepCostTable:
    """Time every (k, b): batch size by batch size, every k in turn, so that a drift of the
    GPU's clock during calibration moves all of a size's costs alike."""
    costs = {k: [] for k in sorted(replays)}
    for b in sizes:
        for k in costs:
            costs[k].append(time_replays(replays[k][b]))
    return StepCostTable(tuple(sizes), {k: tuple(row) for k, row in costs.items()})


def cuda_graph_time(replays: Sequence[Replay]) -> float:
    """Milliseconds of GPU time one pass of ``replays`` takes (CUDA events, after a warm-up)."""
    import torch

    for _ in range(WARMUP_REPLAYS):
        for replay in replays:
            replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(TIMED_REPLAYS):
        for replay in replays:
            replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / TIMED_REPLAYS


def calibrate(states: Mapping[int, object], broadcast_from_rank0: Callable[[str], str],
              time_replays: Callable[[Sequence[Replay]], float] = cuda_graph_time) -> StepCostTable:
    """Measure on every rank, decide on rank 0's: ``broadcast_from_rank0`` takes this rank's
    table as JSON and returns rank 0's (GroupCoordinator.broadcast_object on the TP group)."""
    sizes, replays = step_replays(states)
    table = measure_step_costs(sizes, replays, time_replays)
    return StepCostTable.from_json(broadcast_from_rank0(table.to_json()))
