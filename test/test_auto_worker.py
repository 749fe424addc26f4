"""The auto gate driving SGLang's real AdaptiveController: every candidate's state built, the
cost table measured from their graphs before the first step, the draft steps following
acceptance, /server_info's view and the Prometheus readings. The GPU worker is a stand-in
implementing upstream's AdaptiveSpecWorker protocol whose states carry stand-in graphs (a
state's graphs need a GPU to capture); test/gpu runs the real one."""

from __future__ import annotations

from types import SimpleNamespace

from sglang.srt.model_executor.runner.shape_key import ShapeKey
from sglang.srt.speculative.adaptive_runtime_state import SpecRuntimeState

from sglang_specgate.auto_policy import AutoGateConfig
from sglang_specgate.controller_params import AutoGateParams
from sglang_specgate.worker import GateController

SIZES = [1, 2, 4, 8, 16, 32, 64]


class Graph:
    def __init__(self, cost: float):
        self.cost = cost
        self.replays = 0

    def replay(self):
        self.replays += 1


def runner(cost_at):
    return SimpleNamespace(backend=SimpleNamespace(_graphs={ShapeKey(size=b): Graph(cost_at(b)) for b in SIZES}))


def stand_in_state(k: int) -> SpecRuntimeState:
    """A verify of k + 1 tokens per request over a fixed cost, a draft extend of one row per
    request, and k - 1 draft decode forwards (the first draft token comes from the extend)."""
    return SpecRuntimeState(
        speculative_num_steps=k, speculative_num_draft_tokens=k + 1,
        draft_attn_backend=None, target_attn_backend=None, draft_extend_attn_backend=None,
        cuda_graph_runner=runner(lambda b: 2.0 * k) if k >= 2 else None,
        target_graph_runner=runner(lambda b: 10.0 + (k + 1) * b),
        cuda_graph_runner_for_draft_extend=runner(lambda b: float(b)),
    )


class StandInWorker:
    def __init__(self, steps=3):
        self.speculative_num_steps = steps
        self.built = []

    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        self.built.append(speculative_num_steps)
        return stand_in_state(speculative_num_steps)

    def apply_runtime_state(self, state):
        self.speculative_num_steps = state.speculative_num_steps


def graph_cost(replays):
    for replay in replays:
        replay()
    return sum(replay.__self__.cost for replay in replays)


def auto_controller(candidates=(0, 1, 2, 3), **config):
    worker = StandInWorker()
    broadcasts = []

    def broadcast_from_rank0(text):  # one rank: its own table comes back
        broadcasts.append(text)
        return text

    params = AutoGateParams(AutoGateConfig(candidates, **config), broadcast_from_rank0, time_replays=graph_cost)
    ctrl = GateController(worker, params)
    ctrl.register(stand_in_state(3))  # as EAGLEWorkerV2.init_cuda_graphs registers the running state
    ctrl.init_states(cuda_graph_bs=None)
    return worker, ctrl, params, broadcasts


def run(ctrl, worker, batch_size, steps, accepted):
    """Decode steps with verify results a step late, as under the overlap scheduler;
    ``accepted(k)``: drafts each request accepted in a step with k draft steps, except in a
    drafting step right after a plain one, which drafts from logits the off path never
    computed: none."""
    chosen, pending = [], None
    for _ in range(steps):
        ctrl.activate_step_by_batch(batch_size)
        k = worker.speculative_num_steps
        cold = k > 0 and chosen[-1:] == [0]
        chosen.append(k)
        if pending is not None:
            ctrl.on_verify_complete(*pending)
        pending = ([0 if cold else accepted(k)] * batch_size, batch_size)
    ctrl.on_verify_complete(*pending)  # the last step's result too: every result is processed
    return chosen


def test_every_candidates_state_is_built_and_measured_before_the_first_step():
    worker, ctrl, params, broadcasts = auto_controller()
    assert worker.built == [0, 1, 2]  # 3 is the running state, registered
    assert len(broadcasts) == 1  # one table, sent once
    costs = params.policy.costs
    assert costs.batch_sizes == tuple(SIZES)
    # t(k, b) = 10 + (k + 1) b + b + 2k for k >= 2
    assert costs.cost(0, 64) == 138.0 and costs.cost(1, 64) == 202.0 and costs.cost(3, 64) == 336.0
    assert params.calibration_s is not None
    assert ctrl.states_built["states"] == [0, 1, 2, 3] and ctrl.states_built["gpu_bytes"] is None  # no GPU
    assert worker.speculative_num_steps == 3  # starts on the server's draft steps


def test_the_draft_steps_follow_acceptance_at_one_batch_size():
    worker, ctrl, params, _ = auto_controller(dwell_steps=4)
    # Every draft accepted: three draft steps pay at 64 requests (goodput 0.76 against plain's 0.46).
    assert set(run(ctrl, worker, 64, 200, accepted=lambda k: k)[-50:]) == {3}
    # Then only the first draft is ever accepted: a longer chain costs more for no more tokens,
    # so one draft step, which still beats plain (0.63 against 0.46).
    chosen = run(ctrl, worker, 64, 1500, accepted=lambda k: min(k, 1))
    assert chosen[-1] == 1
    assert params.policy.best_steps(64) == 1
    assert params.policy.counters.switches >= 1


def test_nothing_accepted_turns_speculation_off_and_probes_stay_within_budget():
    worker, ctrl, params, _ = auto_controller(dwell_steps=2, probe_budget=0.02)
    chosen = run(ctrl, worker, 32, 3000, accepted=lambda k: 0)
    assert chosen[-1] == 0
    snapshot = params.snapshot()
    assert snapshot["probes"] > 0  # plain steps still look at deeper drafts now and then
    assert snapshot["probe_cost_share"] <= 0.02 + 1e-9


def test_after_an_off_period_a_good_draft_brings_speculation_back():
    worker, ctrl, params, _ = auto_controller(dwell_steps=2, probe_budget=0.05)
    assert run(ctrl, worker, 32, 500, accepted=lambda k: 0)[-1] == 0
    # Each probe from plain starts with a warm-up whose verify is cold (nothing accepted,
    # whatever the draft): learning from it would keep the gate plain for good.
    chosen = run(ctrl, worker, 32, 500, accepted=lambda k: k)
    assert chosen[-1] == 3
    snapshot = params.snapshot()
    assert snapshot["probe_warm_ups"] > 0 and snapshot["cold_verifies"] >= snapshot["probe_warm_ups"]
    assert snapshot["acceptance"]["acceptance"][0] > 0.9


def test_server_info_and_prometheus_views():
    worker, ctrl, params, _ = auto_controller()
    run(ctrl, worker, 8, 20, accepted=lambda k: k)
    snapshot = params.snapshot()
    assert snapshot["threshold"] == "auto"
    assert snapshot["candidates"] == [0, 1, 2, 3]
    assert snapshot["cost_table"]["batch_sizes"] == SIZES
    assert set(snapshot["best_by_batch_size"]) == {str(b) for b in SIZES}
    assert snapshot["calibration_s"] == params.calibration_s
    readings = params.readings()
    assert readings["draft_steps"] == params.policy.draft_steps
    assert readings["decode_steps_spec"] + readings["decode_steps_plain"] == 20
    # The counters a threshold gate shows too, which sweeps and soaks read from either.
    assert {k: snapshot[k] for k in readings} == readings
    assert snapshot["active"] is (readings["draft_steps"] > 0)


def test_before_calibration_server_info_names_the_candidates():
    params = AutoGateParams(AutoGateConfig((0, 3)), broadcast_from_rank0=lambda table: table)
    assert params.snapshot() == {"threshold": "auto", "candidates": [0, 3], "calibration_s": None}
