"""The gate's counters in /server_info and Prometheus, and its switch log line.

Nothing here imports prometheus_client at plugin load: SGLang picks its multiprocess mode
when prometheus_client is first imported, after the launcher sets PROMETHEUS_MULTIPROC_DIR
(metrics_collector.py:248), so the metrics are created lazily in the scheduler process.
"""

from __future__ import annotations

import logging
import time

from sglang_specgate.runtime_patches import GATE_METRICS_SLOT, INTERNAL_STATE, assign, assign_item

logger = logging.getLogger("sglang_specgate")

SWITCH_LOG_INTERVAL_S = 10.0


def gated_worker(scheduler):
    """The scheduler's GatedEAGLEWorkerV2, or None when the gate is not in use."""
    worker = getattr(scheduler, "draft_worker", None)
    return worker if hasattr(worker, "gate_state") else None


def add_gate_state(result, scheduler, *args, **kwargs):
    """AFTER hook on ``Scheduler.get_internal_state``: add ``spec_gate`` to internal_state."""
    worker = gated_worker(scheduler)
    if worker is not None:
        assign_item(INTERNAL_STATE, result, "internal_state", "spec_gate", worker.gate_state())
    return result


class GateMetrics:
    """``sglang:spec_gate_active``, ``sglang:spec_gate_draft_steps``,
    ``sglang:spec_gate_switches_total`` and ``sglang:spec_gate_decode_steps_total{mode}``, fed
    from the gate's readings (controller_params)."""

    def __init__(self, labels: dict[str, str]):
        from prometheus_client import Counter, Gauge

        names = list(labels)
        self.labels = labels
        self.active = Gauge(
            "sglang:spec_gate_active", "1 while the gate lets decode steps speculate, else 0.",
            labelnames=names, multiprocess_mode="mostrecent",
        )
        self.draft_steps = Gauge(
            "sglang:spec_gate_draft_steps", "Draft steps per decode step the gate runs now (0: plain).",
            labelnames=names, multiprocess_mode="mostrecent",
        )
        self.switches = Counter(
            "sglang:spec_gate_switches", "Times the gate turned speculation on or off.",
            labelnames=names,
        )
        self.decode_steps = Counter(
            "sglang:spec_gate_decode_steps", "Decode steps by mode (spec: speculative, plain: gated off).",
            labelnames=names + ["mode"],
        )
        self._reported = {"switches": 0, "decode_steps_spec": 0, "decode_steps_plain": 0}

    def update(self, readings: dict) -> None:
        """This runs once per decode step."""
        self.active.labels(**self.labels).set(1 if readings["draft_steps"] else 0)
        self.draft_steps.labels(**self.labels).set(readings["draft_steps"])
        for name, counter, extra in (
            ("switches", self.switches, {}),
            ("decode_steps_spec", self.decode_steps, {"mode": "spec"}),
            ("decode_steps_plain", self.decode_steps, {"mode": "plain"}),
        ):
            total = readings[name]
            if total > self._reported[name]:
                counter.labels(**self.labels, **extra).inc(total - self._reported[name])
                self._reported[name] = total


def export_gate_metrics(result, reporter, *args, **kwargs):
    """AFTER hook on ``SchedulerMetricsReporter.report_decode_stats`` (called once per decode
    batch result, on the ranks that export scheduler metrics)."""
    if not reporter.current_scheduler_metrics_enabled:
        return result
    worker = gated_worker(reporter.scheduler)
    if worker is None:
        return result
    metrics = getattr(reporter, "_spec_gate_metrics", None)
    if metrics is None:
        metrics = GateMetrics(reporter.metrics_collector.labels)
        assign(GATE_METRICS_SLOT, reporter, _spec_gate_metrics=metrics)
    metrics.update(worker.gate_params.readings())
    return result


class SwitchLog:
    """One INFO line per switch, at most one per interval; the suppressed count is reported.
    Wall-clock time only throttles logging: the gate's decisions never read it."""

    def __init__(self, interval_s: float = SWITCH_LOG_INTERVAL_S, clock=time.monotonic):
        self.interval_s = interval_s
        self.clock = clock
        self._last = None
        self._suppressed = 0

    def switched(self, speculating: bool, decode_batch_size: int, threshold: int) -> None:
        """The threshold gate turned speculation on or off."""
        state, relation = ("on", "<=") if speculating else ("off", ">")
        self._log("spec gate: speculation %s (decode batch %d %s %d)",
                  state, decode_batch_size, relation, threshold)

    def chose_steps(self, was: int, steps: int, decode_batch_size: int) -> None:
        """The auto gate moved to another number of draft steps."""
        self._log("spec gate (auto): %d -> %d draft steps (decode batch %d)", was, steps, decode_batch_size)

    def _log(self, message: str, *args) -> None:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            self._suppressed += 1
            return
        suppressed = f" ({self._suppressed} more switches not logged)" if self._suppressed else ""
        logger.info(message + "%s", *args, suppressed)
        self._last = now
        self._suppressed = 0
