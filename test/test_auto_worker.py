"""The auto gate driving SGLang's real AdaptiveController: every candidate's state built, the
cost table measured from their graphs before the first step, the draft steps following
acceptance, /server_info's view and the Prometheus readings. The GPU worker is a stand-in
implementing upstream's AdaptiveSpecWorker protocol whose states carry stand-in graphs (a
state's graphs need a GPU to capture); test/gpu runs the real one."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from spawned_ranks import broadcast_from_rank0, join_group, run_ranks

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


class Clock:
    """Seconds, moved by the test: the time a step's verify result reaches the scheduler."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def auto_controller(candidates=(0, 1, 2, 3), broadcast_from_rank0=None, clock=None, sync_every=256, **config):
    worker = StandInWorker()
    broadcasts = []

    def one_rank(text):  # its own JSON comes back
        broadcasts.append(text)
        return text

    params = AutoGateParams(AutoGateConfig(candidates, **config), broadcast_from_rank0 or one_rank,
                            time_replays=graph_cost, clock=clock or Clock(), sync_every=sync_every)
    ctrl = GateController(worker, params)
    ctrl.register(stand_in_state(3))  # as EAGLEWorkerV2.init_cuda_graphs registers the running state
    ctrl.init_states(cuda_graph_bs=None)
    return worker, ctrl, params, broadcasts


def run(ctrl, worker, batch_size, steps, accepted=lambda k: k, clock=None, live_ms=None, prefill_every=0,
        prefill_ms=(0.0, 0.0)):
    """Decode steps with verify results a step late, as under the overlap scheduler;
    ``accepted(k)``: drafts each request accepted in a step with k draft steps, except in a
    drafting step right after a plain one, which drafts from logits the off path never
    computed: none. With a ``clock``, each step lasts ``live_ms(k)`` on it from the verify
    before it, and a prefill launched before every ``prefill_every``-th step adds its
    ``prefill_ms``: its host work to the interval of the step before it (whose result the
    overlap scheduler processes after launching the prefill), its GPU time to the step after."""
    chosen, pending = [], None

    def verify(host_ms=0.0):
        if clock is not None:
            clock.now += (live_ms(pending[0]) + pending[3] + host_ms) / 1000
        ctrl.on_verify_complete(*pending[1:3])

    for i in range(steps):
        host_ms = 0.0
        if prefill_every and i % prefill_every == 0:
            ctrl.params.prefill_launched()
            host_ms = prefill_ms[0]
        ctrl.activate_step_by_batch(batch_size)
        k = worker.speculative_num_steps
        cold = k > 0 and chosen[-1:] == [0]
        chosen.append(k)
        if pending is not None:
            verify(host_ms)
        pending = (k, [0 if cold else accepted(k)] * batch_size, batch_size, prefill_ms[1] if host_ms else 0.0)
    verify()  # the last step's result too: every result is processed
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


def test_a_state_whose_draft_extend_has_no_graph_is_warned_about_for_the_table(caplog):
    """On FA3 upstream graphs no draft extend, and the table, timed from graph replays, leaves
    the eager launches out: start-up says so."""
    worker = StandInWorker()
    params = AutoGateParams(AutoGateConfig((0, 1, 2, 3)), lambda text: text, time_replays=graph_cost, clock=Clock())
    ctrl = GateController(worker, params)
    running = stand_in_state(3)
    running.cuda_graph_runner_for_draft_extend = None
    ctrl.register(running)
    with caplog.at_level(logging.WARNING, logger="sglang_specgate.worker"):
        ctrl.init_states(cuda_graph_bs=None)
    assert ctrl.states_built["draft_extend_eager"] == [3]
    assert "draft steps [3] has no CUDA graph" in caplog.text and "auto's step cost table" in caplog.text
    assert params.policy.costs.cost(3, 64) == 336.0 - 64  # without its draft extend's 64


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


def test_live_steps_that_cost_more_than_the_table_move_the_gate_at_the_next_sync():
    # The table has three draft steps win at 64 requests when every draft is accepted (goodput
    # 0.76 against plain's 0.46); live drafting steps that take three times the table's make
    # plain win, from the first broadcast of the live factors on.
    clock = Clock()
    worker, ctrl, params, broadcasts = auto_controller(dwell_steps=2, clock=clock, sync_every=64)
    table = params.policy.calibrated

    def live_ms(k):
        return table.cost(k, 64) * (3.0 if k else 1.0)

    chosen = run(ctrl, worker, 64, 63, clock=clock, live_ms=live_ms)
    assert set(chosen) == {3} and params.policy.live_factors is None
    # The first sync (after step 64) has k = 3 timed; k = 1 and 2, never run, lie on the line
    # from plain's table to k = 3's factor, so none of them pays either: plain after the dwell.
    chosen = run(ctrl, worker, 64, 100, clock=clock, live_ms=live_ms)
    assert params.policy.live_factors[3][-1] == pytest.approx(3.0)
    assert params.policy.live_factors[1][-1] == pytest.approx(1 + 2 / 3)
    assert chosen[:4] == [3, 3, 3, 0] and set(chosen[4:]) == {0}
    assert len(broadcasts) == 1 + 2  # the table, then a sync every 64 steps
    snapshot = params.snapshot()
    # Every interval but the two next to the switch.
    assert snapshot["live_costs"] == {"sync_every": 64, "samples": 160, "dropped": 0}
    assert snapshot["best_by_batch_size"]["64"] == 0


def test_no_interval_a_prefill_ran_in_is_timed():
    clock = Clock()
    worker, ctrl, params, _ = auto_controller(clock=clock)
    table = params.policy.calibrated
    run(ctrl, worker, 8, 40, clock=clock, live_ms=lambda k: table.cost(k, 8), prefill_every=4,
        prefill_ms=(table.cost(3, 8) * 0.5, table.cost(3, 8) * 1.5))
    # 39 intervals between verify results; a prefill before steps 4, 8, ..., 36 reaches the
    # interval before it and the one after: 18 left out, every other one exactly the table's.
    assert params.live_costs.recorded == 21 and params.live_costs.dropped == 0
    assert params.live_costs.factors()[3] == pytest.approx((1.0,) * len(SIZES), abs=1e-9)


def test_no_interval_next_to_a_change_of_draft_steps_is_timed(monkeypatch):
    # A change of k (a switch, a probe) swaps state and may flush deferred writes at its launch:
    # its host work lands in the interval before it, its GPU work in its own. The decisions are
    # scripted here (the policy's step replaced), the timing is the params' own.
    clock = Clock()
    worker, ctrl, params, _ = auto_controller(clock=clock)
    table, script = params.policy.calibrated, iter([3] * 5 + [0] * 5 + [1, 3] + [0] * 5 + [3] * 5 + [0] * 3)
    monkeypatch.setattr(params.policy, "step", lambda batch_size: next(script))
    change_ms, pending, last = 0.5 * table.cost(3, 64), None, None
    for _ in range(25):
        k = params.get_steps_for_batch(64)
        if pending is not None:  # the previous step's result, processed after this launch
            clock.now += (table.cost(pending, 64) * (2.0 if pending == 3 else 1.0)
                          + (change_ms if k != pending else 0.0) + (change_ms if pending != last else 0.0)) / 1000
            params.on_verify_complete([0] * 64, 64)
        last, pending = pending, k
    assert params.live_costs.factors()[3] == pytest.approx((2.0,) * len(SIZES))
    assert params.live_costs.factors()[0] == pytest.approx((1.0,) * len(SIZES))
    # Intervals of steps 1..23 that neither follow nor precede a change: 3 of k = 3 at the start,
    # 3 + 3 of plain, 3 of k = 3, 1 of plain.
    assert params.live_costs.recorded == 13 and params.live_costs.dropped == 0


def test_the_peek_predicts_each_step_across_the_syncs():
    # host_seq_lens asks speculates_next before each step; a sync must not change the answer
    # between the peek and the step.
    clock = Clock()
    worker, ctrl, params, _ = auto_controller(clock=clock, dwell_steps=0, sync_every=8)
    table, pending = params.policy.calibrated, None
    for i in range(200):
        b = 64 if i % 50 < 25 else 8
        predicted = params.speculates_next(b)
        k = params.get_steps_for_batch(b)
        assert predicted == (k > 0), i
        if pending is not None:
            clock.now += table.cost(pending[0], pending[1]) * (3.0 if pending[0] else 1.0) / 1000
            params.on_verify_complete([pending[0]] * pending[1], pending[1])
        pending = (k, b)
    assert params.policy.live_factors is not None and params.policy.counters.switches >= 2


def _live_costs_rank(rank: int, world_size: int, port: int, results) -> None:
    """One rank: its own clock, on which only rank 0's drafting steps are slow; the table and the
    live factors come from rank 0 over the gloo group, as GroupCoordinator.broadcast_object."""
    join_group(rank, world_size, port)
    clock = Clock(1000.0 * rank)
    worker, ctrl, params, _ = auto_controller(dwell_steps=2, broadcast_from_rank0=broadcast_from_rank0,
                                              clock=clock, sync_every=32)
    table, slowdown = params.policy.calibrated, 3.0 if rank == 0 else 1.0
    decisions = [run(ctrl, worker, 64, 1, clock=clock,
                     live_ms=lambda k: table.cost(k, 64) * (slowdown if k else 1.0))[0]
                 for _ in range(300)]
    results.put((rank, (decisions, params.policy.live_factors, params.live_costs.factors())))


def test_tensor_parallel_ranks_decide_on_rank_0s_live_factors():
    got = run_ranks(_live_costs_rank)
    (decisions, used, own), (decisions_1, used_1, own_1) = got[0], got[1]
    assert decisions == decisions_1 and decisions[-1] == 0
    assert used == used_1 and used[3][-1] == pytest.approx(3.0)  # rank 0's factors, on both ranks
    assert own[3][-1] == pytest.approx(3.0) and own_1[3][-1] == pytest.approx(1.0)  # rank 1's, unused


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
