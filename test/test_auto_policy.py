"""The auto gate, on CPU: the cost table, the acceptance estimate and the policy over them
(tables and verify results in, decisions out). No clocks: every cost is a hand-built number."""

import json
import math
import random

import pytest
from spawned_ranks import broadcast_from_rank0, join_group, run_ranks

from sglang_specgate.acceptance import AcceptanceConfig, AcceptanceEstimate
from sglang_specgate.auto_policy import AutoGateConfig, AutoGatePolicy
from sglang_specgate.live_step_costs import LiveCostConfig, LiveStepCosts, factors_from_json
from sglang_specgate.step_costs import StepCostTable

# A step's cost at batch sizes 1, 8, 32 and 128 for k = 0, 1 and 3 draft steps: drafting costs
# a little at small batches, verifying k + 1 tokens a request costs a lot at large ones.
SIZES = (1, 8, 32, 128)
COSTS = {0: (10, 10.5, 12, 20), 1: (11, 11.8, 14, 34), 3: (13, 14.5, 21, 55)}


def table(costs=COSTS, sizes=SIZES) -> StepCostTable:
    return StepCostTable(sizes, costs)


def gate(prior=0.5, weight=4.0, window=256.0, costs=COSTS, **config) -> AutoGatePolicy:
    config.setdefault("candidates", (0, 1, 3))
    acceptance = AcceptanceConfig(prior=prior, prior_weight=weight, window=window)
    return AutoGatePolicy(AutoGateConfig(acceptance=acceptance, **config), table(costs))


def chain(rng: random.Random, p: float, steps: int, requests: int) -> list[int]:
    """Accepted drafts per request when each draft token is accepted with chance p."""
    accepted = []
    for _ in range(requests):
        a = 0
        while a < steps and rng.random() < p:
            a += 1
        accepted.append(a)
    return accepted


def drive(policy: AutoGatePolicy, sizes, p, rng) -> list[int]:
    """Step through ``sizes``, feeding each step's verify back, plain ones included, as the
    gated worker does: a drafting step right after a plain one drafts from logits the off
    path never computed and has its first draft rejected (cold); any other drafts are
    accepted at p(i)."""
    decisions = []
    for i, b in enumerate(sizes):
        k = policy.step(b)
        cold = k > 0 and decisions[-1:] == [0]
        decisions.append(k)
        policy.record_verify(k, [0] * b if cold else chain(rng, p(i) if callable(p) else p, k, b))
    return decisions


# --- the cost table ---------------------------------------------------------------------------

def test_cost_at_a_measured_size_is_the_measurement():
    t = table()
    assert [t.cost(3, b) for b in SIZES] == [13.0, 14.5, 21.0, 55.0]
    assert t.steps == (0, 1, 3)


def test_between_sizes_a_batch_costs_what_the_size_it_pads_up_to_costs():
    t = table()
    assert t.cost(1, 2) == t.cost(1, 8) == 11.8
    assert t.cost(0, 33) == t.cost(0, 128) == 20.0


def test_beyond_the_largest_size_costs_scale_with_the_batch_keeping_their_ratios():
    t = table()
    assert t.cost(0, 256) == 40.0
    assert t.cost(3, 256) / t.cost(0, 256) == t.cost(3, 128) / t.cost(0, 128)


def test_cost_lookup_rejects_unknown_k_and_empty_batches():
    with pytest.raises(ValueError):
        table().cost(2, 8)
    with pytest.raises(ValueError):
        table().cost(0, 0)


@pytest.mark.parametrize("sizes, costs", [
    ((), {0: ()}),
    ((8, 1), {0: (1, 2)}),
    ((1, 1), {0: (1, 2)}),
    ((0, 8), {0: (1, 2)}),
    ((1, True), {0: (1, 2)}),
    ((1, 8), {1: (1, 2)}),
    ((1, 8), {0: (1, 2), -1: (1, 2)}),
    ((1, 8), {0: (1,)}),
    ((1, 8), {0: (1, 0)}),
    ((1, 8), {0: (1, -2)}),
    ((1, 8), {0: (1, math.nan)}),
    ((1, 8), {0: (1, math.inf)}),
    ((1, 8), {0: (1, "2")}),
])
def test_invalid_cost_table_rejected(sizes, costs):
    with pytest.raises(ValueError):
        StepCostTable(sizes, costs)


def test_the_broadcast_form_reads_back_bit_for_bit():
    rng = random.Random(7)
    t = StepCostTable((1, 2, 4, 24, 160), {k: tuple(rng.uniform(1e-4, 1e4) for _ in range(5))
                                           for k in (0, 1, 2, 5)})
    text = t.to_json()
    back = StepCostTable.from_json(text)
    assert back == t
    assert back.to_json() == text
    assert StepCostTable.from_json(json.dumps(json.loads(text), indent=2)) == t


@pytest.mark.parametrize("text", [
    "", "[]", '{"batch_sizes": [1]}', '{"batch_sizes": [1], "costs": {"0": [1]}, "x": 1}',
    '{"batch_sizes": [1], "costs": {"zero": [1]}}', '{"batch_sizes": [1], "costs": {"0": 1}}',
    '{"batch_sizes": [1], "costs": {"0": [NaN]}}', '{"batch_sizes": 1, "costs": {"0": [1]}}',
])
def test_malformed_broadcast_form_rejected(text):
    with pytest.raises(ValueError):
        StepCostTable.from_json(text)


# --- the acceptance estimate ------------------------------------------------------------------

def test_positions_never_observed_hold_the_prior():
    est = AcceptanceEstimate(3, AcceptanceConfig(prior=0.6))
    assert est.acceptance() == (0.6, 0.6, 0.6)
    assert est.expected_tokens(0) == 1.0
    assert est.expected_tokens(3) == pytest.approx(1 + 0.6 + 0.6 ** 2 + 0.6 ** 3)


def test_one_verify_gives_every_reached_position_a_trial():
    est = AcceptanceEstimate(3, AcceptanceConfig(prior=0.5, prior_weight=2.0))
    est.record(3, [0, 1, 3, 2])
    # Reached: position 1 by all 4, 2 by those that passed 1 (3), 3 by those that passed 2 (2);
    # passed: 3, 2 and 1 of them.
    assert est.snapshot()["observations"] == [4.0, 3.0, 2.0]
    assert est.acceptance() == ((3 + 1) / (4 + 2), (2 + 1) / (3 + 2), (1 + 1) / (2 + 2))
    p1, p2, p3 = est.acceptance()
    assert est.expected_tokens(1) == pytest.approx(1 + p1)
    assert est.expected_tokens(3) == pytest.approx(1 + p1 + p1 * p2 + p1 * p2 * p3)


def test_each_new_observation_decays_older_evidence_by_one_window_share():
    est = AcceptanceEstimate(1, AcceptanceConfig(prior=0.5, prior_weight=1.0, window=2.0))
    est.record(1, [1, 1])
    est.record(1, [0, 0, 0, 0])  # four observations: the older two count (1/2)^4
    assert est.snapshot()["observations"] == [2 / 16 + 4]
    assert est.acceptance() == ((2 / 16 + 0.5) / (2 / 16 + 4 + 1),)


def test_the_estimate_follows_a_change_and_its_memory_is_the_window():
    est = AcceptanceEstimate(1, AcceptanceConfig(prior=0.5, prior_weight=1.0, window=50.0))
    for _ in range(2000):
        est.record(1, [1])
    assert est.acceptance()[0] > 0.99
    assert est.snapshot()["observations"][0] == pytest.approx(50.0)
    for _ in range(300):
        est.record(1, [0])
    # What is left: the prior's weight of 1 against about 50 observations of rejection.
    assert est.acceptance()[0] < 0.02


def test_positions_not_drafted_keep_what_they_learnt():
    est = AcceptanceEstimate(3)
    est.record(3, [3, 3, 1])
    deeper = est.acceptance()[1:]
    for _ in range(100):
        est.record(1, [0, 0, 0])
    assert est.acceptance()[1:] == deeper
    assert est.acceptance()[0] < 0.05


def test_a_plain_step_or_an_empty_batch_teaches_nothing():
    est = AcceptanceEstimate(3)
    est.record(3, [2])
    before = est.snapshot()
    est.record(0, [0, 0])
    est.record(3, [])
    assert est.snapshot() == before


@pytest.mark.parametrize("steps, accepted", [(4, [0]), (-1, []), (2, [3]), (2, [-1]), (2, [1.0])])
def test_impossible_verify_results_rejected(steps, accepted):
    with pytest.raises((ValueError, TypeError)):
        AcceptanceEstimate(3).record(steps, accepted)


@pytest.mark.parametrize("config", [
    dict(prior=-0.1), dict(prior=1.1), dict(prior=math.nan), dict(prior_weight=0.0),
    dict(prior_weight=math.inf), dict(window=0.5), dict(window=math.nan),
])
def test_invalid_acceptance_config_rejected(config):
    with pytest.raises(ValueError):
        AcceptanceConfig(**config)


def test_max_steps_must_be_positive():
    with pytest.raises(ValueError):
        AcceptanceEstimate(0)


# --- the policy: decisions --------------------------------------------------------------------

def best(policy: AutoGatePolicy, sizes=(1, 8, 20, 32, 100, 128, 1000)) -> dict[int, int]:
    return {b: policy.best_steps(b) for b in sizes}


def test_low_acceptance_plain_wins_at_large_batches():
    # E(1) = 1.3, E(3) = 1.417: one draft step still pays for small batches.
    assert best(gate(prior=0.3)) == {1: 1, 8: 1, 20: 1, 32: 1, 100: 0, 128: 0, 1000: 0}


def test_near_the_crossover_an_intermediate_k_wins():
    # E(1) = 1.6, E(3) = 2.176: three steps pay up to b = 8, one at 32, none from 128.
    assert best(gate(prior=0.6)) == {1: 3, 8: 3, 20: 1, 32: 1, 100: 0, 128: 0, 1000: 0}


def test_high_acceptance_always_speculates_at_batch_one():
    p = gate(prior=0.5)
    decisions = drive(p, [1] * 2000, 0.9, random.Random(3))
    assert decisions == [3] * 2000
    assert p.counters.switches == 0 and p.counters.probes == 0
    assert p.acceptance.acceptance()[0] == pytest.approx(0.9, abs=0.05)
    assert best(gate(prior=0.9)) == dict.fromkeys((1, 8, 20, 32, 100, 128, 1000), 3)


def test_live_acceptance_moves_the_choice_at_a_fixed_batch():
    p = gate(prior=0.9)
    drive(p, [32] * 300, 0.6, random.Random(4))
    assert p.draft_steps == 1
    drive(p, [32] * 300, 0.05, random.Random(5))
    assert p.draft_steps == 0


def test_sizes_between_and_beyond_the_table_decide_like_the_size_they_pad_to():
    p = gate(prior=0.6)
    assert [p.best_steps(b) for b in (2, 9, 33, 129, 4096)] == [3, 1, 0, 0, 0]


def test_an_empty_batch_keeps_the_current_k_and_moves_nothing():
    p = gate(prior=0.3, dwell_steps=1)
    assert [p.step(b) for b in (128, 0, 0, 128)] == [3, 3, 3, 0]


# --- the policy: hysteresis -------------------------------------------------------------------

def test_a_switch_comes_on_the_step_after_the_dwell():
    p = gate(prior=0.3, dwell_steps=4)
    assert [p.step(128) for _ in range(6)] == [3, 3, 3, 3, 0, 0]
    assert p.counters.switches == 1


def test_a_step_the_current_k_wins_restarts_the_dwell():
    p = gate(prior=0.6, dwell_steps=2)
    assert [p.step(b) for b in (128, 128, 8, 128, 128, 128)] == [3, 3, 3, 3, 3, 0]


def test_load_oscillating_around_a_crossover_does_not_flap():
    sizes = [128, 8] * 50
    flapping, damped = gate(prior=0.6, dwell_steps=0), gate(prior=0.6, dwell_steps=4)
    [flapping.step(b) for b in sizes]
    [damped.step(b) for b in sizes]
    assert flapping.counters.switches == 100
    assert damped.counters.switches == 0


def test_switches_are_at_least_dwell_plus_one_steps_apart():
    rng = random.Random(11)
    p = gate(prior=0.6, dwell_steps=5)
    switched_at, k = [], p.draft_steps
    for i in range(20_000):
        p.step(rng.choice((8, 20, 32, 100, 128)))
        if p.draft_steps != k:
            switched_at.append(i)
            k = p.draft_steps
    assert len(switched_at) > 100
    assert min(b - a for a, b in zip(switched_at, switched_at[1:])) >= 6


def test_a_goodput_difference_within_the_margin_never_switches():
    # Plain is 20 % behind everywhere; k = 1 and k = 3 within 2 % of each other, either side.
    k1 = (10, 12, 16, 30)
    close = {0: tuple(c * 0.75 for c in k1), 1: k1,
             3: tuple(c * 1.36 * r for c, r in zip(k1, (0.98, 1.02, 0.99, 1.01)))}
    rng = random.Random(12)
    sizes = [rng.randint(1, 200) for _ in range(5000)]
    within, without = gate(prior=0.6, costs=close), gate(prior=0.6, costs=close, margin=0.0,
                                                         dwell_steps=0)
    assert within.best_steps(8) == 1 and within.best_steps(1) == 3
    assert [within.step(b) for b in sizes] == [3] * 5000
    assert within.counters.switches == 0
    [without.step(b) for b in sizes]
    assert without.counters.switches > 100


# --- the policy: probes -----------------------------------------------------------------------

def probe_starts(decisions: list[int], warm_up: int = 1, probe: int = 3) -> list[int]:
    """Where each probe from plain starts, checking every drafting step is in one: a warm-up
    at ``warm_up`` then ``probe`` (a run cut off at the end may end on its warm-up)."""
    drafting = [(i, k) for i, k in enumerate(decisions) if k]
    starts = [i for i, k in drafting if k == warm_up]
    pairs = [step for i in starts for step in ((i, warm_up), (i + 1, probe))]
    assert drafting == [step for step in pairs if step[0] < len(decisions)]
    return starts


def test_probes_while_plain_warm_up_first_are_spaced_by_their_budget_and_counted_apart():
    # At b = 32 plain costs 12; a probe from plain is a warm-up at k = 1 (2 more) and then the
    # probe at k = 3 (9 more). A budget of 1/16 earns 0.75 a plain step, so 11 / 0.75 = 14.7
    # plain steps pay for a probe (the minimum interval, 4, does not bind), the change carried.
    p = gate(prior=0.1, dwell_steps=0, probe_budget=1 / 16, probe_min_interval=4)
    decisions = drive(p, [32] * 1200, 0.1, random.Random(13))
    assert decisions[0] == 0  # the first step already leaves k = 3
    starts = probe_starts(decisions)
    assert starts[:3] == [15, 31, 46]
    assert {b - a for a, b in zip(starts, starts[1:])} == {15, 16}
    c = p.counters
    assert c.probes == c.probe_warm_ups == len(starts) == 76
    assert c.decode_steps == {0: 1200 - 2 * 76, 1: 0, 3: 0}
    assert c.cold_verifies == 76  # each warm-up's verify; the probes' own are learnt from
    assert c.probe_cost == 76 * (2 + 9)
    assert p.snapshot()["probe_cost_share"] == 76 * 11 / (1048 * 12 + 76 * (14 + 21)) <= 1 / 16


def test_a_drafting_step_right_after_a_plain_one_is_not_learnt_from():
    p = gate(prior=0.5, dwell_steps=0)
    p.record_verify(0, [0] * 8)  # a plain step
    p.record_verify(3, [0] * 8)  # drafted from logits the off path never computed
    assert p.acceptance.acceptance() == (0.5, 0.5, 0.5)
    assert p.counters.cold_verifies == 1
    p.record_verify(3, [3] * 8)  # the draft is warm again
    assert p.acceptance.acceptance()[0] == (8 + 2) / (8 + 4)
    assert p.snapshot()["cold_verifies"] == 1


def test_cold_probes_cannot_talk_the_gate_out_of_a_good_draft():
    # The first shift run's failure: each probe from plain was the first drafting step after
    # plain ones, rejected whatever the draft, so the estimate for the first draft fell to 0
    # and the gate stayed plain through a domain where drafts were 90 % accepted.
    p = gate(dwell_steps=8, probe_budget=1 / 16, probe_min_interval=4)
    drive(p, [128] * 400, 0.05, random.Random(19))
    assert p.draft_steps == 0
    drive(p, [8] * 400, 0.9, random.Random(20))
    assert p.draft_steps == 3
    assert p.acceptance.acceptance()[0] == pytest.approx(0.9, abs=0.05)


def test_the_minimum_interval_bounds_probes_a_generous_budget_would_allow():
    p = gate(prior=0.1, dwell_steps=0, probe_budget=1.0, probe_min_interval=4)
    decisions = drive(p, [32] * 400, 0.1, random.Random(14))
    # The credit covers a probe at each interval: a warm-up, the probe, then 4 plain steps.
    assert probe_starts(decisions) == list(range(4, 400, 5))


def test_probe_cost_stays_within_budget_under_changing_load():
    rng = random.Random(15)
    p = gate(prior=0.1, probe_budget=0.02)
    drive(p, [rng.choice((1, 8, 32, 128, 500)) for _ in range(20_000)], 0.1, rng)
    snap = p.snapshot()
    assert snap["probes"] > 20
    assert 0 < snap["probe_cost_share"] <= 0.02


def test_a_workload_shift_while_plain_is_detected_within_a_bounded_number_of_steps():
    # At b = 32 a budget of 1/64 earns 12 / 64 a plain step and a probe from plain costs 2 + 9
    # more, so a probe comes every 59 steps; a probe of 32 requests keeps (31/32)^32, about
    # 36 %, of a position's older evidence.
    period, dwell = 59, 8
    probing = gate(window=32.0, probe_budget=1 / 64, probe_min_interval=1, dwell_steps=dwell)
    never = gate(window=32.0, probe_budget=0.0, dwell_steps=dwell)
    rng = random.Random(16)
    for p in (probing, never):
        drive(p, [32] * 300, 0.1, rng)
        assert p.draft_steps == 0
    probes = probing.counters.probes
    decisions = drive(probing, [32] * 1000, 0.9, rng)
    switched = next(i for i, k in enumerate(decisions) if decisions[i:i + 3] == [3, 3, 3])
    assert switched <= 2 * period + dwell + 1
    assert probing.draft_steps == 3
    assert probing.counters.probes - probes <= 2
    drive(never, [32] * 5000, 0.9, rng)
    assert never.draft_steps == 0 and never.counters.probes == 0


def test_probes_from_an_intermediate_k_run_the_probe_k():
    p = gate(prior=0.6, dwell_steps=0, probe_budget=1 / 8, probe_min_interval=1)
    decisions = drive(p, [32] * 200, 0.6, random.Random(17))
    assert p.draft_steps == 1 and set(decisions) == {1, 3}
    assert p.counters.probe_cost == p.counters.probes * (21 - 14)
    assert p.snapshot()["acceptance"]["observations"][2] > 0


def test_no_probes_at_the_probe_k_itself():
    p = gate(prior=0.9, probe_budget=1.0, probe_min_interval=1)
    drive(p, [8] * 500, 0.9, random.Random(18))
    assert p.counters.probes == 0


# --- the policy: peek, determinism, snapshot, validation --------------------------------------

def mixed_sizes(rng: random.Random, n: int) -> list[int]:
    """Load that drifts and jumps, with the odd empty batch and sizes beyond the table."""
    sizes, b = [], 1
    for _ in range(n):
        if rng.random() < 0.01:
            b = rng.choice((0, 1, 300))
        else:
            b = max(1, min(300, b + rng.randint(-6, 6)))
        sizes.append(b)
    return sizes


def test_the_peek_predicts_each_step_and_records_nothing():
    rng = random.Random(21)
    peeking = gate(dwell_steps=3, probe_budget=0.05, probe_min_interval=2)
    for i, b in enumerate(mixed_sizes(rng, 5000)):
        before = peeking.snapshot()
        predicted = peeking.next_steps(b)
        speculates = peeking.speculates_next(b)
        assert peeking.snapshot() == before
        k = peeking.step(b)
        assert predicted == k and speculates == (k > 0)
        peeking.record_verify(k, chain(rng, 0.5 + 0.4 * math.sin(i / 300), k, b))
    assert peeking.counters.switches > 10 and peeking.counters.probes > 10


def test_same_inputs_same_decisions():
    def run() -> tuple[list[int], dict]:
        rng = random.Random(22)
        p = gate(dwell_steps=2, probe_budget=0.05)
        decisions = drive(p, mixed_sizes(rng, 5000), lambda i: 0.2 if i % 2000 < 1000 else 0.8, rng)
        return decisions, p.snapshot()
    assert run() == run()


def test_snapshot_is_json_ready_and_says_what_the_gate_sees():
    p = gate(prior=0.3, dwell_steps=0, probe_budget=0.25, probe_min_interval=1)
    p.step(128)  # k = 0 from the first step
    p.step(128)  # plain: a probe here costs 35 more, which a quarter of plain's 20 earns in 7
    p.step(0)
    snap = p.snapshot()
    assert json.loads(json.dumps(snap)) == snap
    assert snap["draft_steps"] == 0
    assert snap["candidates"] == [0, 1, 3] and snap["probe_steps"] == 3
    assert snap["margin"] == 0.05 and snap["dwell_steps"] == 0
    assert StepCostTable.from_dict(snap["cost_table"]) == table()
    assert snap["best_by_batch_size"] == {"1": 1, "8": 1, "32": 1, "128": 0}
    assert snap["decode_steps"] == {"0": 3, "1": 0, "3": 0}
    assert snap["switches"] == 1 and snap["probes"] == 0
    assert snap["last_decode_batch_size"] == 0
    assert snap["decode_cost"] == 40.0 and snap["probe_cost_share"] == 0.0
    assert snap["acceptance"]["acceptance"] == [0.3, 0.3, 0.3]
    assert snap["acceptance"]["expected_tokens"] == pytest.approx([1, 1.3, 1.39, 1.417])


@pytest.mark.parametrize("config", [
    dict(candidates=()), dict(candidates=(0,)), dict(candidates=(1, 3)), dict(candidates=(0, 3, 1)),
    dict(candidates=(0, 3, 3)), dict(candidates=(-1, 0, 3)), dict(candidates=(False, 3)),
    dict(margin=-0.01), dict(margin=math.nan), dict(dwell_steps=-1), dict(dwell_steps=1.5),
    dict(probe_budget=-0.1), dict(probe_budget=1.5), dict(probe_budget=math.nan),
    dict(probe_min_interval=0), dict(probe_steps=0), dict(probe_steps=2),
])
def test_invalid_config_rejected(config):
    config.setdefault("candidates", (0, 1, 3))
    with pytest.raises(ValueError):
        AutoGateConfig(**config)


def test_candidates_need_costs():
    with pytest.raises(ValueError, match=r"\[2\]"):
        AutoGatePolicy(AutoGateConfig((0, 2, 3)), table())


def test_verify_results_and_batch_sizes_must_be_possible():
    p = gate()
    with pytest.raises(ValueError):
        p.record_verify(2, [0])
    with pytest.raises(ValueError):
        p.record_verify(1, [2])
    with pytest.raises(ValueError):
        p.step(-1)


# --- tensor parallelism -----------------------------------------------------------------------

TP_STEPS = 50_000


def _tp_rank(rank: int, world_size: int, port: int, results) -> None:
    """One rank: rank 0 measures the table and broadcasts its JSON form, every rank then runs
    the same load, with verify results a step late as under the overlap scheduler."""
    import torch.distributed as dist

    join_group(rank, world_size, port)
    measure = random.Random(30 + rank)  # each rank's own clock; only rank 0's table counts
    sizes = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
    measured = StepCostTable(sizes, {
        k: tuple((1 + 0.15 * k + 0.02 * b * (k + 1)) * measure.uniform(0.97, 1.03)
                 for b in sizes) for k in (0, 1, 2, 3)})
    costs = StepCostTable.from_json(broadcast_from_rank0(measured.to_json()))
    dist.destroy_process_group()
    load = random.Random(31)  # the scheduler's batches and the verify results, alike on all ranks
    policy = AutoGatePolicy(
        AutoGateConfig((0, 1, 2, 3), dwell_steps=4, probe_budget=0.03, probe_min_interval=8),
        costs)
    decisions, pending = [], None
    for i, b in enumerate(mixed_sizes(load, TP_STEPS)):
        k = policy.step(b)
        decisions.append(k)
        if pending:
            policy.record_verify(*pending)
        p = 0.15 + 0.8 * (0.5 + 0.5 * math.sin(i / 3000))
        pending = (k, chain(load, p, k, b))
    results.put((rank, (decisions, json.dumps(policy.snapshot(), sort_keys=True))))


def test_tensor_parallel_ranks_take_the_same_decisions_from_rank_0s_table():
    got = run_ranks(_tp_rank)
    assert len(got[0][0]) == TP_STEPS
    assert got[0] == got[1]
    snap = json.loads(got[0][1])
    assert snap["switches"] > 20 and snap["probes"] > 20
    assert all(n > 0 for n in snap["decode_steps"].values())


# --- live step costs --------------------------------------------------------------------------

def live(**config) -> LiveStepCosts:
    return LiveStepCosts(table(), LiveCostConfig(**config))


def test_live_steps_give_each_k_and_size_its_ratio_to_the_table():
    costs = live(window=4.0)
    for _ in range(20):
        costs.record(3, 20, 21 * 1.5)  # pads to 32, where k = 3 costs 21
        costs.record(0, 128, 20 * 1.1)
    factors = costs.factors()
    # k = 3: timed at 32 only, so every size takes 32's; k = 0 at 128 only; k = 1 never: the
    # line between them, a third of the way from plain's to k = 3's.
    assert factors[3] == pytest.approx((1.5,) * 4)
    assert factors[0] == pytest.approx((1.1,) * 4)
    assert factors[1] == pytest.approx((1.1 + 0.4 / 3,) * 4)
    # A size timed once leans on its k's mean over all sizes; the size with the window's worth of
    # samples moves a little towards it. Untimed sizes take the nearest timed one (a tie: the smaller).
    costs.record(3, 1, 13 * 1.2)
    held = sum(0.75 ** j for j in range(20))  # the window's decayed count at 32
    pooled = (1.5 * held + 1.2) / (held + 1)
    one, many = (1.2 + 8 * pooled) / 9, (1.5 * held + 8 * pooled) / (held + 8)
    assert costs.factors()[3] == pytest.approx((one, one, many, many))
    assert costs.recorded == 41 and costs.dropped == 0


def test_a_size_timed_a_few_times_does_not_swing_its_ks_factor():
    """On a GPU, k = 3's factors swung from one captured size to the next where a size had a few
    samples, and the best k alternated between 3 and plain by size (docs/design.md)."""
    costs = live(window=64.0)
    for _ in range(200):
        costs.record(3, 20, 21 * 1.8)  # well timed at 32
    costs.record(3, 1, 13 * 3.0)  # one jittery step at size 1
    f = costs.factors()[3]
    assert f[0] < 2.0 and f[2] == pytest.approx(1.8, rel=0.01)
    for _ in range(200):
        costs.record(3, 1, 13 * 3.0)  # sustained: size 1 earns its own factor
    assert costs.factors()[3][0] == pytest.approx(3.0, rel=0.15)


def test_a_k_never_timed_is_not_left_at_the_tables_optimism():
    costs = live()
    costs.record(3, 32, 21 * 2.5)
    # Plain never timed: its table (1) below, k = 3's 2.5 above.
    assert costs.factors() == {0: (1.0,) * 4, 1: pytest.approx((1.5,) * 4), 3: pytest.approx((2.5,) * 4)}
    costs = live()
    costs.record(1, 32, 14 * 1.2)
    assert costs.factors()[3] == pytest.approx((1.2,) * 4)  # nothing timed above: the nearest below
    assert live().factors() == {k: (1.0,) * 4 for k in (0, 1, 3)}


def test_the_mean_forgets_at_its_window():
    costs = live(window=4.0)
    for _ in range(200):
        costs.record(1, 8, 11.8 * 2.0)
    for _ in range(8):
        costs.record(1, 8, 11.8 * 1.0)
    # 8 new samples keep (3/4)^8, 10 %, of the old evidence's weight.
    assert costs.factors()[1][1] == pytest.approx(1 + 0.75 ** 8, rel=1e-3)


def test_samples_far_from_the_table_are_dropped_not_learnt():
    costs = live()
    costs.record(0, 32, 12 * 30)  # an idle gap between two steps
    costs.record(0, 32, 12 * 0.1)
    assert costs.recorded == 0 and costs.dropped == 2
    assert costs.factors()[0] == (1.0,) * 4


def test_live_factors_read_back_bit_for_bit_and_bad_ones_are_refused():
    costs = live()
    costs.record(3, 128, 55 * 1.37)
    assert factors_from_json(costs.to_json(), table()) == costs.factors()
    for text in ('{"0": [1.0, 1.0, 1.0, 1.0]}', '{"0": [1,1,1,1], "1": [1,1,1,1], "3": [1,1,1,1]}',
                 '{"0": [1.0, 1.0, 1.0], "1": [1.0, 1.0, 1.0], "3": [1.0, 1.0, 1.0]}',
                 '{"0": [1.0, 1.0, 1.0, -1.0], "1": [1.0, 1.0, 1.0, 1.0], "3": [1.0, 1.0, 1.0, 1.0]}'):
        with pytest.raises(ValueError):
            factors_from_json(text, table())


@pytest.mark.parametrize("config", [dict(window=0.5), dict(min_ratio=0.0), dict(min_ratio=1.0),
                                    dict(max_ratio=1.0), dict(max_ratio=math.inf), dict(prior_samples=-1.0),
                                    dict(prior_samples=math.nan)])
def test_invalid_live_cost_config_rejected(config):
    with pytest.raises(ValueError):
        LiveCostConfig(**config)


def test_live_factors_move_the_choice_and_the_snapshot_shows_both_tables():
    # Acceptance 0.9: the table has k = 3 win at every size; live drafting steps at 128 that
    # cost twice the table's make plain win there.
    p = gate(prior=0.9)
    assert p.best_steps(128) == 3
    p.use_live_factors({0: (1.0,) * 4, 1: (1.0, 1.0, 1.5, 2.0), 3: (1.0, 1.0, 1.5, 2.0)})
    assert p.best_steps(128) == 0 and p.best_steps(1) == 3
    snap = p.snapshot()
    assert StepCostTable.from_dict(snap["cost_table"]) == table()  # as measured at start-up
    assert snap["live_factors"]["3"] == [1.0, 1.0, 1.5, 2.0]
    assert snap["best_by_batch_size"]["128"] == 0


def test_a_probe_right_after_a_drafting_step_needs_no_warm_up():
    # A budget that pays for a probe every step: the first probe after plain warms up, the
    # ones after it follow drafting steps and measure straight away.
    p = gate(prior=0.1, dwell_steps=0, probe_budget=1.0, probe_min_interval=1)
    decisions = drive(p, [32] * 6, 0.1, random.Random(23))
    assert decisions == [0, 1, 3, 3, 3, 3]
    assert p.counters.probe_warm_ups == 1 and p.counters.probes == 4
