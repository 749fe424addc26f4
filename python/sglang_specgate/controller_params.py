"""The gate's policies in the shape SGLang's ``AdaptiveController`` calls (its ``params``):
``get_steps_for_batch`` once per decode step, ``on_verify_complete`` once per verify result.

``ThresholdGateParams`` drives the threshold policy (policy.py) between the server's draft steps
and 0; ``AutoGateParams`` drives the auto policy (auto_policy.py) over its candidates, once the
cost table is measured (step_cost_calibration.py). Both pair each verify result with the
decision of the step it verified, and report the same readings to Prometheus.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Callable, NamedTuple

from sglang_specgate.auto_policy import AutoGateConfig, AutoGatePolicy
from sglang_specgate.live_step_costs import LiveStepCosts, factors_from_json
from sglang_specgate.observability import SwitchLog
from sglang_specgate.policy import SpecGatePolicy
from sglang_specgate.reenable import ReenableAcceptance
from sglang_specgate.step_cost_calibration import calibrate, cuda_graph_time
from sglang_specgate.threshold_setting import AUTO

logger = logging.getLogger(__name__)

PLAIN_STEPS = 0  # upstream's steps-0 state: no drafting, one-token verify
# A bound, not a tuning knob: at most one step is in flight under the overlap scheduler.
MAX_STEPS_IN_FLIGHT = 4
# Decode steps between two broadcasts of rank 0's live factors: one small CPU broadcast per 256
# steps on a multi-rank server, none on one rank.
LIVE_COST_SYNC_STEPS = 256


class Launch(NamedTuple):
    """A launched decode step, as its verify result is paired with it."""

    steps: int  # draft steps it ran
    batch_size: int
    # Whether the time from the verify result before it to its own is its decode step alone:
    # not where a prefill or a change of draft steps was launched next to it. Under the overlap
    # scheduler a step's result is processed after the next batch was launched, so that
    # launch's host work lands in the step's interval too.
    timed: bool


class LaunchedSteps:
    """What both policies share: verify results paired with the steps that launched them, the
    acceptance around off periods, and upstream's graph-size hooks (every size, every state)."""

    def __init__(self, candidate_steps: list[int], switch_log: SwitchLog | None):
        self.candidate_steps = candidate_steps
        self.switch_log = switch_log or SwitchLog()
        self.reenable_acceptance = ReenableAcceptance()
        # Launched decode steps whose verify results are not processed yet: with the overlap
        # scheduler a result arrives after the next step was decided, but results arrive in
        # launch order, one per decode step (batch_result_processor.py:651).
        self._unverified = deque(maxlen=MAX_STEPS_IN_FLIGHT)
        self._prefill_since_decode = False
        self._last_launched_steps: int | None = None

    def get_steps_for_batch(self, batch_size: int) -> int:
        steps = self._decide(batch_size)
        switched = self._last_launched_steps not in (None, steps)
        if switched:
            self._untime_last_launch()
        self._unverified.append(Launch(steps, batch_size, not (switched or self._prefill_since_decode)))
        self._prefill_since_decode, self._last_launched_steps = False, steps
        return steps

    def prefill_launched(self) -> None:
        """The worker launched a prefill forward (it runs between two decode steps)."""
        self._prefill_since_decode = True
        self._untime_last_launch()

    def _untime_last_launch(self) -> None:
        if self._unverified:
            self._unverified[-1] = self._unverified[-1]._replace(timed=False)

    def on_verify_complete(self, num_correct_drafts_per_req, batch_size) -> None:
        if not self._unverified:
            return
        launch = self._unverified.popleft()
        if num_correct_drafts_per_req:
            self._verified(launch, num_correct_drafts_per_req)
            accept_length = 1 + sum(num_correct_drafts_per_req) / len(num_correct_drafts_per_req)
            self.reenable_acceptance.record(launch.steps != PLAIN_STEPS, accept_length)

    def set_cuda_graph_bs(self, cuda_graph_bs) -> None:
        pass

    def cuda_graph_bs_for_step(self, step: int):
        return None  # capture every decode graph size for every state

    def states_built(self, states: dict) -> None:
        """The controller built every candidate's state (``states`` by draft steps)."""

    def _decide(self, batch_size: int) -> int:
        raise NotImplementedError

    def _verified(self, launch: Launch, num_correct_drafts_per_req) -> None:
        """The verify result of ``launch``."""


class ThresholdGateParams(LaunchedSteps):
    """The threshold gate: the server's draft steps while the policy speculates, else 0."""

    def __init__(self, policy: SpecGatePolicy, speculative_steps: int, switch_log: SwitchLog | None = None):
        super().__init__([speculative_steps, PLAIN_STEPS], switch_log)
        self.policy = policy
        self.speculative_steps = speculative_steps

    def _decide(self, batch_size: int) -> int:
        switches = self.policy.counters.switches
        speculate = self.policy.step(batch_size)
        if self.policy.counters.switches != switches:
            self.switch_log.switched(speculate, batch_size, self.policy.config.threshold)
        return self.speculative_steps if speculate else PLAIN_STEPS

    def speculates_next(self, batch_size: int) -> bool:
        return self.policy.speculates_next(batch_size)

    def snapshot(self) -> dict:
        return {**self.policy.snapshot(), "draft_steps": self.readings()["draft_steps"]}

    def readings(self) -> dict:
        c = self.policy.counters
        return {"draft_steps": self.speculative_steps if self.policy.speculating else PLAIN_STEPS,
                "switches": c.switches, "decode_steps_spec": c.decode_steps_spec,
                "decode_steps_plain": c.decode_steps_plain}


class AutoGateParams(LaunchedSteps):
    """The auto gate. Its policy exists once the candidates' states are built and their cost
    table measured (step_cost_calibration.py), before the first decode step.
    ``broadcast_from_rank0``: this rank's JSON in, rank 0's out: the table once, then every
    ``sync_every`` decode steps the live factors (live_step_costs.py), timed on ``clock``
    (seconds) and used by every rank from the same step on."""

    def __init__(self, config: AutoGateConfig, broadcast_from_rank0: Callable[[str], str],
                 time_replays=cuda_graph_time, switch_log: SwitchLog | None = None,
                 clock: Callable[[], float] = time.perf_counter, sync_every: int = LIVE_COST_SYNC_STEPS):
        super().__init__(list(config.candidates), switch_log)
        self.config = config
        self.broadcast_from_rank0 = broadcast_from_rank0
        self.time_replays = time_replays
        self.clock = clock
        self.sync_every = sync_every
        self.policy: AutoGatePolicy | None = None
        self.live_costs: LiveStepCosts | None = None
        self.calibration_s: float | None = None
        self._decisions = 0
        self._last_verify_at: float | None = None

    def states_built(self, states: dict) -> None:
        started = time.perf_counter()  # reported only: every rank decides on rank 0's table
        costs = calibrate({k: states[k] for k in self.candidate_steps}, self.broadcast_from_rank0, self.time_replays)
        self.calibration_s = time.perf_counter() - started
        self.policy = AutoGatePolicy(self.config, costs)
        self.live_costs = LiveStepCosts(costs)
        logger.info("spec gate (auto): measured the step cost table in %.1f s: %s", self.calibration_s,
                    costs.to_json())

    def _decide(self, batch_size: int) -> int:
        policy = self.policy
        was, switches = policy.draft_steps, policy.counters.switches
        steps = policy.step(batch_size)
        if policy.counters.switches != switches:
            self.switch_log.chose_steps(was, policy.draft_steps, batch_size)
        self._decisions += 1
        # After the decision, so that a peek at the next one (speculates_next) sees the factors
        # it will be taken with; at the same decode step on every rank.
        if self._decisions % self.sync_every == 0:
            policy.use_live_factors(factors_from_json(self.broadcast_from_rank0(self.live_costs.to_json()),
                                                      policy.calibrated))
        return steps

    def _verified(self, launch: Launch, num_correct_drafts_per_req) -> None:
        # Rank 0's reading is the one that counts (broadcast); the others' are never used.
        now, last = self.clock(), self._last_verify_at
        self._last_verify_at = now
        if last is not None and launch.timed:
            self.live_costs.record(launch.steps, launch.batch_size, 1000 * (now - last))
        self.policy.record_verify(launch.steps, num_correct_drafts_per_req)  # plain ones too: cold drafts

    def speculates_next(self, batch_size: int) -> bool:
        return self.policy.speculates_next(batch_size)

    def snapshot(self) -> dict:
        calibration = {"calibration_s": self.calibration_s}
        if self.policy is None:  # before start-up finished
            return {"threshold": AUTO, "candidates": list(self.config.candidates), **calibration}
        readings = self.readings()  # the counters both gates show, for sweeps and soaks
        live = self.live_costs
        return {"threshold": AUTO, "active": readings["draft_steps"] != PLAIN_STEPS, **readings,
                **self.policy.snapshot(), **calibration,
                "live_costs": {"sync_every": self.sync_every, "samples": live.recorded, "dropped": live.dropped}}

    def readings(self) -> dict:
        c = self.policy.counters
        plain = c.decode_steps[PLAIN_STEPS]
        return {"draft_steps": self.policy.draft_steps, "switches": c.switches,
                "decode_steps_spec": sum(c.decode_steps.values()) - plain + c.probes + c.probe_warm_ups,
                "decode_steps_plain": plain}
