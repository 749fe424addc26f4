"""The gate's counters in /server_info (and, from the scheduler process, Prometheus).

Nothing here imports prometheus_client at plugin load: SGLang picks its multiprocess mode
when prometheus_client is first imported, after the launcher sets PROMETHEUS_MULTIPROC_DIR.
"""

from __future__ import annotations


def gate_of(scheduler):
    """The policy of a scheduler's gated worker, or None when the gate is not in use."""
    worker = getattr(scheduler, "draft_worker", None)
    return getattr(worker, "gate", None)


def add_gate_state(result, scheduler, *args, **kwargs):
    """AFTER hook on ``Scheduler.get_internal_state``: add ``spec_gate`` to internal_state."""
    gate = gate_of(scheduler)
    if gate is not None:
        result.internal_state["spec_gate"] = {
            **gate.snapshot(),
            "fast_off_path": scheduler.draft_worker.fast_off_path,
        }
    return result
