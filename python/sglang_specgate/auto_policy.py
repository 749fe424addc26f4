"""The auto gate: each decode step runs the number of draft steps k, out of the candidates,
with the highest expected goodput b * E(k) / t(k, b).

E(k) is from live acceptance (acceptance.py), t(k, b) from rank 0's cost table (step_costs.py).
Its inputs are the same on every tensor-parallel rank (decode batch sizes, verify results, the
broadcast table) and it reads no clock and draws no random number, so every rank takes the same
decision at the same step (a rank that disagreed would replay a different graph and hang the
collectives).

Stability: the gate leaves its current k only once some candidate has beaten it by more than
``margin`` (relative goodput) on ``dwell_steps`` consecutive decode steps; the step after runs
the best candidate. It switches at most once in dwell_steps + 1 steps, and never over a goodput
difference within the margin. It starts at the largest candidate, so its first verify results
measure every draft position.

Probes: below ``probe_steps`` draft steps (plain above all) the deeper positions' acceptance is
not observed, and better drafts would go unnoticed. Each such step earns ``probe_budget`` times
its estimated cost as credit; once the credit covers a probe's extra cost over the current step,
t(probe_steps, b) - t(k, b), and ``probe_min_interval`` steps have passed since the last probe or
switch, that step runs probe_steps instead, as a probe. The probes' extra cost so stays within
probe_budget of the estimated decode time; the snapshot reports it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Sequence

from sglang_specgate.acceptance import AcceptanceConfig, AcceptanceEstimate
from sglang_specgate.step_costs import StepCostTable


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


@dataclass(frozen=True)
class AutoGateConfig:
    """The draft step counts to choose from (0 and at least one more; their states are built at
    start-up), the hysteresis (margin, dwell) and the probing (budget, interval, probe k)."""

    candidates: tuple[int, ...]
    margin: float = 0.05
    dwell_steps: int = 8
    probe_budget: float = 0.01
    probe_min_interval: int = 16
    probe_steps: int | None = None  # None: the largest candidate
    acceptance: AcceptanceConfig = AcceptanceConfig()

    def __post_init__(self) -> None:
        candidates = tuple(self.candidates)
        if not all(_is_int(k) and k >= 0 for k in candidates) or any(
                a >= b for a, b in zip(candidates, candidates[1:])):
            raise ValueError(
                f"candidates must be distinct integers >= 0, ascending; got {list(candidates)}")
        if len(candidates) < 2 or candidates[0] != 0:
            raise ValueError(
                f"candidates must hold 0 (plain) and at least one k >= 1; got {list(candidates)}")
        if not (math.isfinite(self.margin) and self.margin >= 0):
            raise ValueError(f"margin must be >= 0, got {self.margin}")
        if not (_is_int(self.dwell_steps) and self.dwell_steps >= 0):
            raise ValueError(f"dwell steps must be an integer >= 0, got {self.dwell_steps!r}")
        if not (math.isfinite(self.probe_budget) and 0 <= self.probe_budget <= 1):
            raise ValueError(f"probe budget must be in [0, 1], got {self.probe_budget}")
        if not (_is_int(self.probe_min_interval) and self.probe_min_interval >= 1):
            raise ValueError(
                f"probe interval must be an integer >= 1, got {self.probe_min_interval!r}")
        probe_steps = candidates[-1] if self.probe_steps is None else self.probe_steps
        if probe_steps not in candidates[1:]:
            raise ValueError(
                f"probe steps must be a candidate >= 1 ({list(candidates[1:])}), got {probe_steps}")
        object.__setattr__(self, "candidates", candidates)
        object.__setattr__(self, "probe_steps", probe_steps)


@dataclass
class AutoGateCounters:
    """What the gate has done since start-up. Costs are the table's estimates, in its unit."""

    decode_steps: dict[int, int] = field(default_factory=dict)  # by k, probes not included
    probes: int = 0
    switches: int = 0
    probe_cost: float = 0.0  # what the probes cost beyond the steps they stood in for
    decode_cost: float = 0.0  # what every decode step cost, the probes included
    last_decode_batch_size: int = 0

    def record(self, batch_size: int, steps: int, probe: bool, switched: bool, cost: float,
               probe_extra: float) -> None:
        """One decode step: ``cost`` what it cost, ``probe_extra`` what a probe cost beyond the
        step it stood in for."""
        self.last_decode_batch_size = batch_size
        self.switches += switched
        if probe:
            self.probes += 1
            self.probe_cost += probe_extra
        else:
            self.decode_steps[steps] += 1
        self.decode_cost += cost


class AutoGatePolicy:
    """Decides, once per decode step, how many draft steps that step runs (0: plain)."""

    def __init__(self, config: AutoGateConfig, costs: StepCostTable) -> None:
        missing = [k for k in config.candidates if k not in costs.costs]
        if missing:
            raise ValueError(f"the cost table has no costs for candidates {missing}")
        self.config = config
        self.costs = costs
        self.acceptance = AcceptanceEstimate(config.candidates[-1], config.acceptance)
        self.draft_steps = config.candidates[-1]
        self.counters = AutoGateCounters(decode_steps={k: 0 for k in config.candidates})
        # Consecutive decode steps on which some candidate beat the current one by the margin.
        self._streak = 0
        # Probe credit earned, and decode steps taken, since the last probe or switch.
        self._credit = 0.0
        self._since = 0

    def goodput(self, steps: int, batch_size: int) -> float:
        """b * E(k) / t(k, b): expected tokens per unit of cost at this batch size."""
        expected = self.acceptance.expected_tokens(steps)
        return batch_size * expected / self.costs.cost(steps, batch_size)

    def best_steps(self, batch_size: int) -> int:
        """The candidate with the highest goodput at this batch size now (the smaller k on a
        tie), hysteresis aside: where the gate heads while batches of this size go on."""
        return max(self.config.candidates, key=lambda k: self.goodput(k, batch_size))

    def step(self, decode_batch_size: int) -> int:
        """Record one decode step of ``decode_batch_size`` requests; return its draft steps."""
        if not (_is_int(decode_batch_size) and decode_batch_size >= 0):
            raise ValueError(
                f"decode batch size must be an integer >= 0, got {decode_batch_size!r}")
        steps, probe, state = self._decide(decode_batch_size)
        was = self.draft_steps
        self.draft_steps, self._streak, self._credit, self._since = state

        cost = self.costs.cost(steps, decode_batch_size) if decode_batch_size else 0.0
        probe_extra = cost - self.costs.cost(was, decode_batch_size) if probe and decode_batch_size else 0.0
        self.counters.record(decode_batch_size, steps, probe, self.draft_steps != was, cost, probe_extra)
        return steps

    def next_steps(self, decode_batch_size: int) -> int:
        """The draft steps ``step`` would return for this batch size, recording nothing: for
        code that prepares the step before the worker asks ``step``."""
        return self._decide(decode_batch_size)[0]

    def speculates_next(self, decode_batch_size: int) -> bool:
        """Whether ``step`` would draft for this batch size, recording nothing."""
        return self.next_steps(decode_batch_size) > 0

    def record_verify(self, steps: int, accepted: Sequence[int]) -> None:
        """One decode step's verify result: the draft steps that step ran (what ``step``
        returned for it) and, per request, how many of its drafts were accepted."""
        if steps not in self.config.candidates:
            raise ValueError(
                f"draft steps {steps!r} is not a candidate {list(self.config.candidates)}")
        self.acceptance.record(steps, accepted)

    def _decide(self, batch_size: int) -> tuple[int, bool, tuple[int, int, float, int]]:
        """(draft steps to run, whether that is a probe, the state after the step)."""
        cfg, current = self.config, self.draft_steps
        if batch_size == 0:  # nothing decodes: nothing to compare or to earn
            return current, False, (current, self._streak, self._credit, self._since)
        goodput = {k: self.goodput(k, batch_size) for k in cfg.candidates}
        best = max(cfg.candidates, key=goodput.__getitem__)
        beaten = goodput[best] > goodput[current] * (1 + cfg.margin)
        streak = self._streak + 1 if beaten else 0
        if streak > cfg.dwell_steps:
            return best, False, (best, 0, 0.0, 0)

        credit, since = self._credit, self._since + 1
        if current < cfg.probe_steps and cfg.probe_budget > 0:
            here = self.costs.cost(current, batch_size)
            credit += cfg.probe_budget * here
            extra = self.costs.cost(cfg.probe_steps, batch_size) - here
            if since >= cfg.probe_min_interval and credit >= extra:
                return cfg.probe_steps, True, (current, streak, 0.0, 0)
        return current, False, (current, streak, credit, since)

    def snapshot(self) -> dict:
        """JSON-ready: configuration, the cost table, the acceptance estimate, the k each
        measured batch size would get now, and the counters."""
        cfg, c = self.config, self.counters
        return {
            "draft_steps": self.draft_steps,
            **{key: value for key, value in asdict(cfg).items() if key != "acceptance"},
            "candidates": list(cfg.candidates),
            "cost_table": self.costs.to_dict(),
            "acceptance": self.acceptance.snapshot(),
            "best_by_batch_size": {str(b): self.best_steps(b) for b in self.costs.batch_sizes},
            "decode_steps": {str(k): n for k, n in c.decode_steps.items()},
            "probes": c.probes,
            "switches": c.switches,
            "probe_cost": c.probe_cost,
            "decode_cost": c.decode_cost,
            "probe_cost_share": c.probe_cost / c.decode_cost if c.decode_cost else 0.0,
            "last_decode_batch_size": c.last_decode_batch_size,
        }
