"""The gate policy: a pure state machine over decode batch sizes."""

import pytest

from sglang_specgate.policy import GateConfig, SpecGatePolicy


def run(policy: SpecGatePolicy, sizes: list[int]) -> list[bool]:
    return [policy.step(bs) for bs in sizes]


def gate(threshold: int, dwell: int = 0, reenable: int | None = None) -> SpecGatePolicy:
    return SpecGatePolicy(GateConfig(threshold, threshold if reenable is None else reenable, dwell))


def test_speculates_up_to_threshold_inclusive():
    assert run(gate(8), [1, 7, 8]) == [True, True, True]


def test_turns_off_on_first_step_above_threshold():
    assert run(gate(8), [8, 9, 30]) == [True, False, False]


def test_without_dwell_turns_back_on_at_first_step_at_or_below():
    assert run(gate(8), [9, 8, 9, 3]) == [False, True, False, True]


def test_dwell_needs_that_many_calm_steps_before_the_speculating_one():
    p = gate(8, dwell=3)
    assert run(p, [9, 5, 5, 5, 5]) == [False, False, False, False, True]


def test_a_busy_step_restarts_the_dwell():
    p = gate(8, dwell=2)
    assert run(p, [9, 4, 4, 9, 4, 4, 4]) == [False, False, False, False, False, False, True]


def test_reenable_threshold_is_hysteresis():
    p = gate(8, reenable=4)
    assert run(p, [9, 8, 6, 5, 4]) == [False, False, False, False, True]


def test_hovering_at_threshold_does_not_flap_with_dwell():
    sizes = [8, 9] * 50
    flapping, damped = gate(8), gate(8, dwell=4)
    run(flapping, sizes)
    run(damped, sizes)
    assert flapping.counters.switches == 99
    assert damped.counters.switches == 1


def test_threshold_zero_never_disables():
    assert run(gate(0), [1, 500, 10_000]) == [True, True, True]
    assert gate(0).counters.switches == 0


def test_counters_and_snapshot():
    p = gate(2, dwell=1)
    run(p, [1, 3, 2, 2, 1])
    assert p.snapshot() == {
        "active": True, "threshold": 2, "reenable_threshold": 2, "dwell_steps": 1,
        "decode_steps_spec": 3, "decode_steps_plain": 2, "switches": 2,
        "last_decode_batch_size": 1,
    }


def test_the_peek_predicts_each_step_and_records_nothing():
    sizes = [((i * 7919) % 23) for i in range(1000)]
    peeking, stepping = gate(10, dwell=5, reenable=7), gate(10, dwell=5, reenable=7)
    for bs in sizes:
        before = peeking.snapshot()
        predicted = peeking.speculates_next(bs)
        assert peeking.snapshot() == before
        assert predicted == peeking.step(bs) == stepping.step(bs)
    assert peeking.snapshot() == stepping.snapshot()


@pytest.mark.parametrize(
    "threshold, reenable, dwell",
    [(-1, 0, 0), (4, 5, 0), (4, -1, 0), (4, 0, 0), (0, 1, 0), (4, 4, -1)],
)
def test_invalid_config_rejected(threshold, reenable, dwell):
    with pytest.raises(ValueError):
        GateConfig(threshold, reenable, dwell)


def test_negative_batch_size_rejected():
    with pytest.raises(ValueError):
        gate(4).step(-1)
