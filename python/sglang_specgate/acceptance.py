"""Live draft acceptance, from verify results: per draft position i, p_i, the chance that the
i-th draft token is accepted given that every earlier one was.

With chain drafting (top-k 1) a request whose verify accepted a of k drafts reached positions
1..min(a + 1, k) and passed 1..a, so one verify result gives every reached position a trial.
A tree's verify accepts a path of a of its k depths, read the same way (position i: depth i);
the auto gate weighs a tree only against plain decoding, whose tokens a step are 1.
Each position's estimate forgets at the rate it learns: every new observation of a position
multiplies its older evidence by 1 - 1/window, so its noise does not depend on the batch size,
and a position that is not drafted keeps what it last learnt. A prior, worth ``prior_weight``
observations, stands in for evidence a position never had and keeps estimates off 0 and 1.

Verify results are the same on every tensor-parallel rank and this uses only IEEE addition,
multiplication and division (no pow or log, whose last bit may differ between hosts' maths
libraries), so every rank holds the same estimate bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from operator import index
from typing import Sequence


@dataclass(frozen=True)
class AcceptanceConfig:
    prior: float = 0.5
    prior_weight: float = 4.0
    window: float = 256.0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.prior) and 0 <= self.prior <= 1):
            raise ValueError(f"prior acceptance must be in [0, 1], got {self.prior}")
        if not (math.isfinite(self.prior_weight) and self.prior_weight > 0):
            raise ValueError(f"prior weight must be > 0, got {self.prior_weight}")
        if not (math.isfinite(self.window) and self.window >= 1):
            raise ValueError(f"acceptance window must be >= 1, got {self.window}")


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _power(x: float, n: int) -> float:
    """x ** n by repeated squaring: multiplications only, so the same bits on every host."""
    result = 1.0
    while n:
        if n & 1:
            result *= x
        x *= x
        n >>= 1
    return result


class AcceptanceEstimate:
    """Per-position conditional acceptance for chains of up to ``max_steps`` draft tokens."""

    def __init__(self, max_steps: int, config: AcceptanceConfig = AcceptanceConfig()) -> None:
        if not (_is_int(max_steps) and max_steps >= 1):
            raise ValueError(f"max draft steps must be an integer >= 1, got {max_steps!r}")
        self.max_steps = max_steps
        self.config = config
        self._keep = 1.0 - 1.0 / config.window
        # Decayed counts per position (index 0 is the first draft token).
        self._passed = [0.0] * max_steps
        self._reached = [0.0] * max_steps
        self.verify_steps = 0
        self._expected = self._expected_tokens()

    def record(self, steps: int, accepted: Sequence[int]) -> None:
        """One verify result: ``steps`` draft tokens proposed per request, ``accepted[r]`` of
        them accepted for request r (the bonus token not counted)."""
        if not (_is_int(steps) and 0 <= steps <= self.max_steps):
            raise ValueError(f"draft steps must be in [0, {self.max_steps}], got {steps!r}")
        counts = [0] * (steps + 1)  # counts[a]: requests that accepted exactly a drafts
        for a in accepted:
            a = index(a)
            if not 0 <= a <= steps:
                raise ValueError(f"accepted drafts must be in [0, {steps}], got {a}")
            counts[a] += 1
        if steps == 0 or not any(counts):
            return  # a plain step drafts nothing: there is nothing to learn
        at_least = 0  # requests that accepted at least i + 1 drafts, from the deepest position
        for i in range(steps - 1, -1, -1):
            passed = at_least + counts[i + 1]
            reached = passed + counts[i]
            decay = _power(self._keep, reached)
            self._passed[i] = self._passed[i] * decay + passed
            self._reached[i] = self._reached[i] * decay + reached
            at_least = passed
        self.verify_steps += 1
        self._expected = self._expected_tokens()

    def acceptance(self) -> tuple[float, ...]:
        """p_1..p_max_steps: the evidence, shrunk towards the prior by its weight."""
        prior, weight = self.config.prior, self.config.prior_weight
        return tuple((passed + weight * prior) / (reached + weight)
                     for passed, reached in zip(self._passed, self._reached))

    def expected_tokens(self, steps: int) -> float:
        """E(k): tokens a request gains in a step with k draft steps, the bonus token included."""
        return self._expected[steps]

    def _expected_tokens(self) -> tuple[float, ...]:
        # E(k) = 1 + sum over i <= k of p_1 * ... * p_i, for k = 0..max_steps.
        expected, survive = [1.0], 1.0
        for p in self.acceptance():
            survive *= p
            expected.append(expected[-1] + survive)
        return tuple(expected)

    def snapshot(self) -> dict:
        return {
            "acceptance": list(self.acceptance()),
            "observations": list(self._reached),
            "expected_tokens": list(self._expected),
            "verify_steps": self.verify_steps,
            **asdict(self.config),
        }
