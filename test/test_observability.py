"""The gate in /server_info, Prometheus and the log. Schedulers and metrics reporters need a
GPU to build, so small stand-ins carry exactly the attributes the hooks read."""

from __future__ import annotations

import logging
from types import SimpleNamespace

from sglang.srt.managers.io_struct import GetInternalStateReqOutput

from sglang_specgate import host_seq_lens
from sglang_specgate.drafting import Drafting
from sglang_specgate.graph_plan import graph_plan
from sglang_specgate.observability import SwitchLog, add_gate_state, export_gate_metrics
from sglang_specgate.policy import GateConfig, SpecGatePolicy
from sglang_specgate.worker import GatedEAGLEWorkerV2, ThresholdGateParams


class StandInWorker(SimpleNamespace):
    gate_state = GatedEAGLEWorkerV2.gate_state  # the real method, on the attributes it reads


TREE = Drafting(num_steps=3, topk=4, num_draft_tokens=8, chosen_by="sglang")
TREE_PLAN = graph_plan(TREE, (1, 2, 4), (0, 3), deferred_writes=True)


def gated_scheduler(threshold=4):
    gate = SpecGatePolicy(GateConfig(threshold, threshold, 0))
    worker = StandInWorker(fast_off_path=True, fast_off_path_blocker=None, off_draft_extend="kv-only",
                           skips_off_draft_extend=False, gate_params=ThresholdGateParams(gate, 3),
                           deferred_draft_kv=None, adaptive_controller=SimpleNamespace(states_built=None),
                           drafting=TREE, graph_plan=TREE_PLAN)
    return SimpleNamespace(draft_worker=worker), gate


def test_internal_state_carries_the_gate(monkeypatch):
    monkeypatch.setattr(host_seq_lens, "mirror", None)  # a Triton server's: none installed
    scheduler, gate = gated_scheduler()
    for bs in (2, 9, 9):
        gate.step(bs)
    result = add_gate_state(GetInternalStateReqOutput(internal_state={"x": 1}), scheduler, None)
    assert result.internal_state["spec_gate"] == {
        "active": False, "threshold": 4, "reenable_threshold": 4, "dwell_steps": 0,
        "decode_steps_spec": 1, "decode_steps_plain": 2, "switches": 1,
        "last_decode_batch_size": 9, "draft_steps": 0,
        "drafting": {"shape": "tree", "topk": 4, "num_steps": 3, "num_draft_tokens": 8, "chosen_by": "sglang"},
        "graph_plan": TREE_PLAN, "states_built": None, "fast_off_path": True,
        "fast_off_path_blocker": None, "off_draft_extend": "kv-only",
        "deferred_draft_kv": None, "reenable_acceptance": {"reenables": 0, "recent": []},
        "host_seq_lens": None,
    }


def test_internal_state_untouched_without_gate():
    plain = SimpleNamespace(draft_worker=SimpleNamespace())
    result = add_gate_state(GetInternalStateReqOutput(internal_state={"x": 1}), plain, None)
    assert result.internal_state == {"x": 1}


def test_prometheus_metrics_follow_the_counters():
    from prometheus_client import REGISTRY

    scheduler, gate = gated_scheduler()
    labels = {"model_name": "m", "engine_type": "unified"}
    reporter = SimpleNamespace(current_scheduler_metrics_enabled=True, scheduler=scheduler,
                               metrics_collector=SimpleNamespace(labels=labels))

    def sample(name, **extra):
        return REGISTRY.get_sample_value(name, {**labels, **extra})

    for bs in (2, 9, 9, 3):
        gate.step(bs)
        export_gate_metrics(None, reporter, True)
    assert sample("sglang:spec_gate_active") == 1
    assert sample("sglang:spec_gate_draft_steps") == 3
    assert sample("sglang:spec_gate_switches_total") == 2
    assert sample("sglang:spec_gate_decode_steps_total", mode="spec") == 2
    assert sample("sglang:spec_gate_decode_steps_total", mode="plain") == 2
    gate.step(10)
    export_gate_metrics(None, reporter, True)
    assert sample("sglang:spec_gate_active") == 0
    assert sample("sglang:spec_gate_draft_steps") == 0
    assert sample("sglang:spec_gate_switches_total") == 3

    silent = SimpleNamespace(current_scheduler_metrics_enabled=False, scheduler=scheduler)
    export_gate_metrics(None, silent, True)  # non-exporting ranks create nothing
    assert not hasattr(silent, "_spec_gate_metrics")


def test_switch_log_is_rate_limited(caplog):
    now = [0.0]
    log = SwitchLog(interval_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="sglang_specgate"):
        log.switched(False, 12, 8)
        now[0] = 3
        log.switched(True, 5, 8)
        log.switched(False, 9, 8)
        now[0] = 14
        log.switched(True, 2, 8)
        now[0] = 24  # one interval later exactly: logged, and the count starts again
        log.switched(False, 10, 8)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "spec gate: speculation off (decode batch 12 > 8)",
        "spec gate: speculation on (decode batch 2 <= 8) (2 more switches not logged)",
        "spec gate: speculation off (decode batch 10 > 8)",
    ]
