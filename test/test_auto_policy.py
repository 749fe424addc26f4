"""The auto gate, on CPU: the cost table. No clocks: every cost is a hand-built number."""

import json
import math
import random

import pytest

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
