"""The cost table t(k, b): what one decode step with k draft steps costs at decode batch b.

Measured once by rank 0 (replaying the captured graphs at each captured batch size) and sent to
the other tensor-parallel ranks in its JSON form, so every rank decides from the same numbers
instead of its own clock. Costs are in one unit throughout; only their ratios matter.

Between measured batch sizes a batch costs what the next measured size up costs: the graph
runner pads a batch up to the next captured size and replays that graph. Beyond the largest
size (SGLang runs such batches eagerly, unmeasured) every k's cost scales with b from the
largest, so their ratios, and hence the choice between them, stay those of the largest size.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from dataclasses import dataclass


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def broadcast_form(data) -> str:
    """What rank 0 sends the other ranks. Python writes floats so they read back bit for bit,
    and the form is canonical, so equal data give equal text."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class StepCostTable:
    """``costs[k][i]`` is the cost of a step with ``k`` draft steps at ``batch_sizes[i]``."""

    batch_sizes: tuple[int, ...]
    costs: dict[int, tuple[float, ...]]

    def __post_init__(self) -> None:
        sizes = tuple(self.batch_sizes)
        if not sizes:
            raise ValueError("the cost table needs at least one batch size")
        if not all(_is_int(b) and b >= 1 for b in sizes):
            raise ValueError(f"batch sizes must be integers >= 1, got {list(sizes)}")
        if any(a >= b for a, b in zip(sizes, sizes[1:])):
            raise ValueError(f"batch sizes must be strictly increasing, got {list(sizes)}")
        if not all(_is_int(k) and k >= 0 for k in self.costs):
            raise ValueError(f"draft step counts must be integers >= 0, got {list(self.costs)}")
        if 0 not in self.costs:
            raise ValueError("the cost table needs k = 0 (the plain step)")
        rows = {}
        for k in sorted(self.costs):
            row = tuple(self.costs[k])
            if len(row) != len(sizes):
                raise ValueError(
                    f"k = {k} has {len(row)} costs for {len(sizes)} batch sizes")
            if not all(isinstance(c, (int, float)) and not isinstance(c, bool)
                       and math.isfinite(c) and c > 0 for c in row):
                raise ValueError(f"costs must be finite and > 0, got {list(row)} for k = {k}")
            rows[k] = tuple(float(c) for c in row)
        object.__setattr__(self, "batch_sizes", sizes)
        object.__setattr__(self, "costs", rows)

    @property
    def steps(self) -> tuple[int, ...]:
        """The draft step counts the table has costs for, ascending."""
        return tuple(self.costs)

    def cost(self, steps: int, batch_size: int) -> float:
        """t(steps, batch_size): the measured cost of the size this batch is padded up to."""
        if steps not in self.costs:
            raise ValueError(f"the cost table has no k = {steps}; it has {list(self.costs)}")
        if batch_size < 1:
            raise ValueError(f"a decode step has >= 1 request, got {batch_size}")
        row = self.costs[steps]
        i = bisect_left(self.batch_sizes, batch_size)
        if i < len(row):
            return row[i]
        largest = self.batch_sizes[-1]
        return row[-1] * batch_size / largest

    def scaled(self, factors: dict[int, tuple[float, ...]]) -> StepCostTable:
        """This table with each cost times its factor (``factors[k][i]`` for ``costs[k][i]``)."""
        return StepCostTable(self.batch_sizes, {k: tuple(c * f for c, f in zip(row, factors[k]))
                                                for k, row in self.costs.items()})

    def to_dict(self) -> dict:
        """JSON-ready: ``{"batch_sizes": [...], "costs": {"k": [...]}}``."""
        return {
            "batch_sizes": list(self.batch_sizes),
            "costs": {str(k): list(row) for k, row in self.costs.items()},
        }

    @classmethod
    def from_dict(cls, data: dict) -> StepCostTable:
        if not isinstance(data, dict) or set(data) != {"batch_sizes", "costs"}:
            raise ValueError("a cost table is an object with exactly 'batch_sizes' and 'costs'")
        if not isinstance(data["costs"], dict) or not isinstance(data["batch_sizes"], list):
            raise ValueError("'batch_sizes' must be a list and 'costs' an object")
        costs = {}
        for key, row in data["costs"].items():
            is_k = isinstance(key, str) and key.isascii() and key.isdigit()
            if not is_k or not isinstance(row, list):
                raise ValueError(f"each cost row is a list keyed by k as a string, got {key!r}")
            costs[int(key)] = row
        return cls(tuple(data["batch_sizes"]), costs)

    def to_json(self) -> str:
        return broadcast_form(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> StepCostTable:
        return cls.from_dict(json.loads(text))
