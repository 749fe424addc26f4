"""Accept length around re-enables (pure bookkeeping)."""

from sglang_specgate.reenable import WINDOW_STEPS, ReenableAcceptance


def feed(tracker, steps):
    for speculated, accept in steps:
        tracker.record(speculated, accept)


def test_warm_reenable_recovers_on_the_first_step():
    t = ReenableAcceptance()
    feed(t, [(True, 3.0)] * 12 + [(False, 1.0)] * 5 + [(True, 2.9)] * 12)
    (episode,) = t.snapshot()["recent"]
    assert episode["before"] == 3.0
    assert episode["after"] == [2.9] * WINDOW_STEPS
    assert episode["steps_to_recover"] == 1
    assert t.reenables == 1


def test_cold_reenable_shows_slow_recovery():
    t = ReenableAcceptance()
    cold = [1.0, 1.0, 1.2, 1.5, 2.0, 2.5, 2.8, 3.0, 3.0, 3.0]
    feed(t, [(True, 3.0)] * 10 + [(False, 1.0)] * 3 + [(True, a) for a in cold])
    assert t.snapshot()["recent"][0]["steps_to_recover"] == 7  # 2.8 >= 0.9 * 3.0


def test_never_recovering_reports_none_and_episodes_are_bounded():
    t = ReenableAcceptance()
    for _ in range(20):
        feed(t, [(True, 3.0)] * 10 + [(False, 1.0)] * 2 + [(True, 1.0)] * 10 + [(True, 3.0)] * 10)
    snap = t.snapshot()
    assert snap["reenables"] == 20
    assert len(snap["recent"]) == 8
    assert snap["recent"][-1]["steps_to_recover"] is None


def test_off_before_any_speculation_records_nothing():
    t = ReenableAcceptance()
    feed(t, [(False, 1.0)] * 3 + [(True, 2.0)] * 3)
    assert t.snapshot() == {"reenables": 0, "recent": []}
