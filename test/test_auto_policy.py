"""The auto gate, on CPU: the cost table and the acceptance estimate. No clocks: every cost
is a hand-built number."""

import json
import math
import random

import pytest

from sglang_specgate.acceptance import AcceptanceConfig, AcceptanceEstimate
from sglang_specgate.step_costs import StepCostTable

# A step's cost at batch sizes 1, 8, 32 and 128 for k = 0, 1 and 3 draft steps: drafting costs
# a little at small batches, verifying k + 1 tokens a request costs a lot at large ones.
SIZES = (1, 8, 32, 128)
COSTS = {0: (10, 10.5, 12, 20), 1: (11, 11.8, 14, 34), 3: (13, 14.5, 20, 55)}


def table(costs=COSTS, sizes=SIZES) -> StepCostTable:
    return StepCostTable(sizes, costs)


# --- the cost table ---------------------------------------------------------------------------

def test_cost_at_a_measured_size_is_the_measurement():
    t = table()
    assert [t.cost(3, b) for b in SIZES] == [13.0, 14.5, 20.0, 55.0]
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
