"""Live step costs: what a decode step with k draft steps really takes, against the cost table.

The table (step_costs.py) times each state's captured graphs replayed with their capture inputs.
A live step also pays for its context (the KV each request's attention reads), for the work
outside the graphs (the verify's accept and sampling, the step's preparation) and for host time
the GPU waits on. All of it weighs more on a drafting step and grows with the batch, so the
table alone leans towards drafting near a crossover (docs/design.md). Rank 0 therefore times
live steps, and the auto gate scales the table by what it measured.

A sample is the time between two consecutive decode steps' verify results reaching the
scheduler: while the GPU stays busy, the second step's time on it, host time it waited on
included. There is none for a step launched next to a prefill or to a change of draft steps
(controller_params.Launch), whose interval holds their work too, and none far from the table
(an idle gap). Each (k, captured size the batch pads to) keeps a decaying mean of live
over table, shrunk towards its k's mean over all sizes while it has few samples (a size the
load passes through now and then would otherwise swing its k's choice on a step or two's
jitter); a size never timed takes its k's nearest timed one, and a k never timed (a candidate
the gate has not run yet) the line between the k around it, rather than the table's optimism.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass

from sglang_specgate.step_costs import StepCostTable, broadcast_form


@dataclass(frozen=True)
class LiveCostConfig:
    window: float = 64.0  # samples a (k, size) mean remembers
    min_ratio: float = 0.5  # live / table outside [min_ratio, max_ratio]: not a decode step alone
    max_ratio: float = 4.0
    prior_samples: float = 8.0  # how many samples a size's own mean needs to outweigh its k's

    def __post_init__(self) -> None:
        if not (math.isfinite(self.window) and self.window >= 1):
            raise ValueError(f"live cost window must be >= 1, got {self.window}")
        if not (math.isfinite(self.prior_samples) and self.prior_samples >= 0):
            raise ValueError(f"live cost prior samples must be >= 0, got {self.prior_samples}")
        if not (0 < self.min_ratio < 1 < self.max_ratio and math.isfinite(self.max_ratio)):
            raise ValueError(f"live cost ratio bounds must satisfy 0 < min < 1 < max, got "
                             f"{self.min_ratio} and {self.max_ratio}")


class LiveStepCosts:
    """Rank 0's live / table ratios per draft step count and captured batch size."""

    def __init__(self, table: StepCostTable, config: LiveCostConfig = LiveCostConfig()) -> None:
        self.table = table
        self.config = config
        self._keep = 1.0 - 1.0 / config.window
        sizes = len(table.batch_sizes)
        # Decayed sums of ratios and of samples, per k and size index.
        self._ratios = {k: [0.0] * sizes for k in table.steps}
        self._samples = {k: [0.0] * sizes for k in table.steps}
        self.recorded = 0
        self.dropped = 0

    def record(self, steps: int, batch_size: int, elapsed_ms: float) -> None:
        """One decode step of ``batch_size`` requests and ``steps`` draft steps took
        ``elapsed_ms``."""
        ratio = elapsed_ms / self.table.cost(steps, batch_size)
        if not self.config.min_ratio <= ratio <= self.config.max_ratio:
            self.dropped += 1
            return
        i = min(bisect_left(self.table.batch_sizes, batch_size), len(self.table.batch_sizes) - 1)
        self._ratios[steps][i] = self._ratios[steps][i] * self._keep + ratio
        self._samples[steps][i] = self._samples[steps][i] * self._keep + 1.0
        self.recorded += 1

    def factors(self) -> dict[int, tuple[float, ...]]:
        """Per k, the factor for each captured size: its mean with ``prior_samples`` of its k's
        mean over all sizes added, else its k's nearest timed size's. A k never timed takes,
        size by size, the line between the nearest timed k below and above it, plain's table
        (a factor of 1) standing in below where plain was never timed, or the nearest below
        where none above was."""
        sizes = range(len(self.table.batch_sizes))
        prior = self.config.prior_samples
        timed = {}
        for k, samples in self._samples.items():
            seen = [i for i in sizes if samples[i] > 0]
            if seen:
                ratios = self._ratios[k]
                pooled = sum(ratios[i] for i in seen) / sum(samples[i] for i in seen)
                means = {i: (ratios[i] + prior * pooled) / (samples[i] + prior) for i in seen}
                timed[k] = tuple(means[min(seen, key=lambda t: (abs(t - i), t))] for i in sizes)
        # A plain step never timed keeps its table entry: its graph is most of what it runs.
        anchors = {0: (1.0,) * len(sizes), **timed}
        factors = {}
        for k in self._samples:
            lo = max(t for t in anchors if t <= k)
            above = [t for t in anchors if t > k]
            if k == lo or not above:
                factors[k] = anchors[lo]
            else:
                hi = min(above)
                factors[k] = tuple(anchors[lo][i] + (anchors[hi][i] - anchors[lo][i]) * (k - lo) / (hi - lo)
                                   for i in sizes)
        return factors

    def to_json(self) -> str:
        return broadcast_form({str(k): list(row) for k, row in self.factors().items()})


def factors_from_json(text: str, table: StepCostTable) -> dict[int, tuple[float, ...]]:
    """Rank 0's factors, checked against the table they scale."""
    data = json.loads(text)
    if not isinstance(data, dict) or {int(k) for k in data} != set(table.steps):
        raise ValueError(f"live cost factors must give every k of the table {list(table.steps)}")
    factors = {}
    for key, row in data.items():
        if not (isinstance(row, list) and len(row) == len(table.batch_sizes)
                and all(isinstance(f, float) and math.isfinite(f) and f > 0 for f in row)):
            raise ValueError(f"k = {key}: one positive factor per batch size, got {row!r}")
        factors[int(key)] = tuple(row)
    return factors
