"""The gate: a pure, deterministic state machine over decode batch sizes.

No torch, no SGLang, no clocks, no randomness: its only input is the sequence of decode
batch sizes, which every tensor-parallel rank sees identically, so every rank decides the
same thing at the same step (a rank that disagreed would capture a different graph width
and hang the collectives).

Semantics (documented in the README):
  * speculate while the decode batch has <= ``threshold`` requests;
  * turn speculation off on the first decode step whose batch has > ``threshold`` requests;
  * turn it back on after ``dwell_steps`` consecutive decode steps whose batch has
    <= ``reenable_threshold`` requests (``reenable_threshold`` defaults to ``threshold``),
    so load hovering around the threshold does not flap every step.
  * ``threshold == 0`` means the gate never fires: always speculate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class GateConfig:
    threshold: int
    reenable_threshold: int
    dwell_steps: int

    def __post_init__(self) -> None:
        if self.threshold < 0:
            raise ValueError(f"threshold must be >= 0, got {self.threshold}")
        # An enabled gate could never resume below 1: decode batches hold at least one request.
        lowest = 1 if self.threshold else 0
        if not lowest <= self.reenable_threshold <= self.threshold:
            raise ValueError(
                f"reenable_threshold must be in [{lowest}, threshold={self.threshold}], "
                f"got {self.reenable_threshold}"
            )
        if self.dwell_steps < 0:
            raise ValueError(f"dwell_steps must be >= 0, got {self.dwell_steps}")

    @property
    def enabled(self) -> bool:
        return self.threshold > 0


@dataclass
class GateCounters:
    """What the gate has done since start-up; exported to /server_info and Prometheus."""

    decode_steps_spec: int = 0
    decode_steps_plain: int = 0
    switches: int = 0
    last_decode_batch_size: int = 0

    def record(self, decode_batch_size: int, speculating: bool, switched: bool) -> None:
        self.last_decode_batch_size = decode_batch_size
        if speculating:
            self.decode_steps_spec += 1
        else:
            self.decode_steps_plain += 1
        if switched:
            self.switches += 1


class SpecGatePolicy:
    """Decides, once per decode step, whether that step speculates."""

    def __init__(self, config: GateConfig) -> None:
        self.config = config
        self.speculating = True
        self.counters = GateCounters()
        # Consecutive decode steps at or below the re-enable threshold while off.
        self._calm_steps = 0

    def step(self, decode_batch_size: int) -> bool:
        """Record one decode step of ``decode_batch_size`` requests; return whether it speculates."""
        if decode_batch_size < 0:
            raise ValueError(f"decode batch size must be >= 0, got {decode_batch_size}")
        speculating, self._calm_steps = self._after(decode_batch_size)
        self.counters.record(decode_batch_size, speculating, switched=speculating != self.speculating)
        self.speculating = speculating
        return speculating

    def speculates_next(self, decode_batch_size: int) -> bool:
        """Whether a decode step of ``decode_batch_size`` requests would speculate, recording
        nothing: for code that prepares the step before the worker asks ``step``."""
        return self._after(decode_batch_size)[0]

    def _after(self, decode_batch_size: int) -> tuple[bool, int]:
        """(speculating, calm steps) once a decode step of this size is taken."""
        cfg = self.config
        if not cfg.enabled:
            return self.speculating, self._calm_steps
        if self.speculating:
            return (False, 0) if decode_batch_size > cfg.threshold else (True, 0)
        if decode_batch_size > cfg.reenable_threshold:
            return False, 0
        calm_steps = self._calm_steps + 1
        # The step that completes the dwell already speculates.
        return (True, 0) if calm_steps > cfg.dwell_steps else (False, calm_steps)

    def snapshot(self) -> dict:
        """A JSON-ready view: configuration, state and counters."""
        return {
            "active": self.speculating,
            **asdict(self.config),
            **asdict(self.counters),
        }
