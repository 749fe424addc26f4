"""The auto gate: each decode step runs the number of draft steps k, out of the candidates,
with the highest expected goodput b * E(k) / t(k, b).

E(k) is from live acceptance (acceptance.py), t(k, b) from rank 0's cost table (step_costs.py),
scaled by rank 0's live factors once it has sent them (live_step_costs.py). Its inputs are the
same on every tensor-parallel rank (decode batch sizes, verify results, the broadcast table and
factors) and it reads no clock and draws no random number, so every rank takes the same decision
at the same step (a rank that disagreed would replay a different graph and hang the collectives).

Stability: the gate leaves its current k only once some candidate has beaten it by more than
``margin`` (relative goodput) on ``dwell_steps`` consecutive decode steps; the step after runs
the best candidate. It switches at most once in dwell_steps + 1 steps, and never over a goodput
difference within the margin. It starts at the largest candidate, so its first verify results
measure every draft position.

Cold drafts: on the fast off path a plain step's draft extend only writes the draft's KV cache
(kv_only_draft.py), so the first drafting step after a plain one drafts from logits nobody
computed and its verify says nothing about the draft. The policy learns from no such verify
result (``cold_verifies`` counts them), on every release: where plain steps run upstream's full
draft extend that forgoes one verify a return to drafting. It tells them apart by the verify
results themselves, which arrive in launch order, one a decode step, plain steps included.

Probes: below ``probe_steps`` draft steps (plain above all) the deeper positions' acceptance is
not observed, and better drafts would go unnoticed. Each such step earns ``probe_budget`` times
its estimated cost as credit; once the credit covers a probe's extra cost over the current step
and ``probe_min_interval`` steps have passed since the last probe or switch, that step runs
probe_steps instead, as a probe. After a plain step, a probe is two steps: a warm-up at the
smallest candidate, whose verify is cold and whose draft extend computes the draft's logits,
then probe_steps. Each probe step is paid from the credit at the batch it runs at, so the probes'
extra cost stays within probe_budget of the estimated decode time, give or take one probe step;
the snapshot reports it.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, field
from typing import NamedTuple, Sequence

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


class Probe(enum.Enum):
    """What a decode step is to the probing."""

    NONE = "none"
    WARM_UP = "warm-up"  # a probe's first step from plain: its draft extend computes the logits
    MEASURE = "measure"  # the step at probe_steps whose verify results are learnt from


@dataclass
class AutoGateCounters:
    """What the gate has done since start-up. Costs are the table's estimates, in its unit."""

    decode_steps: dict[int, int] = field(default_factory=dict)  # by k, probe steps not included
    probes: int = 0
    probe_warm_ups: int = 0
    cold_verifies: int = 0  # drafting steps' verify results not learnt from
    switches: int = 0
    probe_cost: float = 0.0  # what the probe steps cost beyond the steps they stood in for
    decode_cost: float = 0.0  # what every decode step cost, the probe steps included
    last_decode_batch_size: int = 0

    def record(self, batch_size: int, steps: int, probe: Probe, switched: bool, cost: float,
               probe_extra: float) -> None:
        """One decode step: ``cost`` what it cost, ``probe_extra`` what a probe step cost beyond
        the step it stood in for."""
        self.last_decode_batch_size = batch_size
        self.switches += switched
        if probe is Probe.NONE:
            self.decode_steps[steps] += 1
        else:
            self.probes += probe is Probe.MEASURE
            self.probe_warm_ups += probe is Probe.WARM_UP
            self.probe_cost += probe_extra
        self.decode_cost += cost

    def record_cold_verify(self) -> None:
        self.cold_verifies += 1


class _State(NamedTuple):
    """The policy's state between decode steps."""

    draft_steps: int
    streak: int  # consecutive decode steps on which some candidate beat draft_steps by the margin
    credit: float  # probe credit earned and not spent since the last switch (spent as probes run)
    since: int  # decode steps taken since the last probe or switch
    warmed_up: bool  # the last step was a probe's warm-up, so this one measures
    drafted: bool  # the last step drafted, so the draft's logits are computed (not cold)


class AutoGatePolicy:
    """Decides, once per decode step, how many draft steps that step runs (0: plain)."""

    def __init__(self, config: AutoGateConfig, costs: StepCostTable) -> None:
        missing = [k for k in config.candidates if k not in costs.costs]
        if missing:
            raise ValueError(f"the cost table has no costs for candidates {missing}")
        self.config = config
        self.calibrated = costs  # the table measured at start-up
        self.costs = costs  # what the gate decides on: the table, scaled by the live factors
        self.live_factors: dict[int, tuple[float, ...]] | None = None
        self.acceptance = AcceptanceEstimate(config.candidates[-1], config.acceptance)
        self.counters = AutoGateCounters(decode_steps={k: 0 for k in config.candidates})
        self._state = _State(config.candidates[-1], 0, 0.0, 0, False, True)
        # Whether the last verified step drafted: the start-up state drafts, and a prompt's
        # prefill runs its full draft.
        self._last_verified_drafted = True

    @property
    def draft_steps(self) -> int:
        """The k the gate is at (probe steps aside)."""
        return self._state.draft_steps

    def use_live_factors(self, factors: dict[int, tuple[float, ...]]) -> None:
        """Decide from now on with each table cost times its live factor (rank 0's, broadcast)."""
        self.costs = self.calibrated.scaled(factors)
        self.live_factors = factors

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
        was = self._state.draft_steps
        self._state = state

        cost = self.costs.cost(steps, decode_batch_size) if decode_batch_size else 0.0
        probe_extra = cost - self.costs.cost(was, decode_batch_size) if probe is not Probe.NONE else 0.0
        self.counters.record(decode_batch_size, steps, probe, state.draft_steps != was, cost, probe_extra)
        return steps

    def next_steps(self, decode_batch_size: int) -> int:
        """The draft steps ``step`` would return for this batch size, recording nothing: for
        code that prepares the step before the worker asks ``step``."""
        return self._decide(decode_batch_size)[0]

    def speculates_next(self, decode_batch_size: int) -> bool:
        """Whether ``step`` would draft for this batch size, recording nothing."""
        return self.next_steps(decode_batch_size) > 0

    def record_verify(self, steps: int, accepted: Sequence[int]) -> None:
        """One decode step's verify result, plain steps included, in launch order: the draft
        steps that step ran (what ``step`` returned for it) and, per request, how many of its
        drafts were accepted. A drafting step right after a plain one drafted cold: not learnt."""
        if steps not in self.config.candidates:
            raise ValueError(
                f"draft steps {steps!r} is not a candidate {list(self.config.candidates)}")
        warm, self._last_verified_drafted = self._last_verified_drafted, steps > 0
        if steps and not warm:
            self.counters.record_cold_verify()
            return
        self.acceptance.record(steps, accepted)

    def _decide(self, batch_size: int) -> tuple[int, Probe, _State]:
        """(draft steps to run, what the step is to the probing, the state after the step)."""
        cfg, state = self.config, self._state
        current = state.draft_steps
        if batch_size == 0:  # nothing decodes: nothing to compare or to earn
            return current, Probe.NONE, state
        goodput = {k: self.goodput(k, batch_size) for k in cfg.candidates}
        best = max(cfg.candidates, key=goodput.__getitem__)
        beaten = goodput[best] > goodput[current] * (1 + cfg.margin)
        streak = state.streak + 1 if beaten else 0
        credit, since = state.credit, state.since + 1
        if streak > cfg.dwell_steps:  # credit earned at the old k goes, a probe's debt stays
            return best, Probe.NONE, _State(best, 0, min(credit, 0.0), 0, False, best > 0)
        here = self.costs.cost(current, batch_size)
        if state.warmed_up:  # the probe proper, paid for even where the batch grew since
            extra = self.costs.cost(cfg.probe_steps, batch_size) - here
            return cfg.probe_steps, Probe.MEASURE, _State(current, streak, credit - extra, 0, False, True)
        if current < cfg.probe_steps and cfg.probe_budget > 0:
            credit += cfg.probe_budget * here
            extra = self.costs.cost(cfg.probe_steps, batch_size) - here
            warm_up = cfg.candidates[1]
            cold = not state.drafted
            warm_up_extra = self.costs.cost(warm_up, batch_size) - here if cold else 0.0
            if since >= cfg.probe_min_interval and credit >= extra + warm_up_extra:
                if cold:
                    return warm_up, Probe.WARM_UP, _State(current, streak, credit - warm_up_extra, 0, True, True)
                return cfg.probe_steps, Probe.MEASURE, _State(current, streak, credit - extra, 0, False, True)
        return current, Probe.NONE, _State(current, streak, credit, since, False, current > 0)

    def snapshot(self) -> dict:
        """JSON-ready: configuration, the cost table, the acceptance estimate, the k each
        measured batch size would get now, and the counters."""
        cfg, c = self.config, self.counters
        return {
            "draft_steps": self.draft_steps,
            **{key: value for key, value in asdict(cfg).items() if key != "acceptance"},
            "candidates": list(cfg.candidates),
            "cost_table": self.calibrated.to_dict(),
            "live_factors": None if self.live_factors is None else {
                str(k): list(row) for k, row in self.live_factors.items()},
            "acceptance": self.acceptance.snapshot(),
            "best_by_batch_size": {str(b): self.best_steps(b) for b in self.costs.batch_sizes},
            "decode_steps": {str(k): n for k, n in c.decode_steps.items()},
            "probes": c.probes,
            "probe_warm_ups": c.probe_warm_ups,
            "cold_verifies": c.cold_verifies,
            "switches": c.switches,
            "probe_cost": c.probe_cost,
            "decode_cost": c.decode_cost,
            "probe_cost_share": c.probe_cost / c.decode_cost if c.decode_cost else 0.0,
            "last_decode_batch_size": c.last_decode_batch_size,
        }
