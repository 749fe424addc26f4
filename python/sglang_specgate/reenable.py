"""Accept length around each re-enable: is the draft warm when speculation comes back?

A drafter skipped while speculation is off comes back with stale state and silently loses
acceptance (TensorRT-LLM PR #16888). The gate keeps the draft KV cache current while off
(only the first draft step after re-enabling starts from an approximate hidden state,
kv_only_draft.py; the GPU tests check it with a draft that needs its KV cache, docs/design.md).
This records, for each re-enable, the mean
accept length of the last speculative steps before the gate turned off and of the first ones
after it turned back on, so /server_info shows whether acceptance recovers and how fast.

Pure bookkeeping over (speculated, accept length) per decode step, in verify order.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_STEPS = 10  # steps compared on each side of an off period
KEPT_EPISODES = 8
RECOVERED_FRACTION = 0.9  # "back to its pre-off value" within 10 %


@dataclass
class Reenable:
    before: float  # mean accept length of the last WINDOW_STEPS speculative steps before off
    after: list[float] = field(default_factory=list)  # first WINDOW_STEPS speculative steps after

    def steps_to_recover(self) -> int | None:
        """1-based index of the first step after re-enable at >= 90 % of ``before``."""
        for i, accept in enumerate(self.after, start=1):
            if accept >= RECOVERED_FRACTION * self.before:
                return i
        return None

    def as_dict(self) -> dict:
        return {
            "before": round(self.before, 3),
            "after": [round(a, 3) for a in self.after],
            "steps_to_recover": self.steps_to_recover(),
        }


class ReenableAcceptance:
    def __init__(self) -> None:
        self._recent_spec = deque(maxlen=WINDOW_STEPS)
        self._was_speculating = True
        self._open: Reenable | None = None
        self.episodes: deque[Reenable] = deque(maxlen=KEPT_EPISODES)
        self.reenables = 0

    def record(self, speculated: bool, accept_length: float) -> None:
        if speculated and not self._was_speculating and self._recent_spec:
            self.reenables += 1
            self._open = Reenable(before=sum(self._recent_spec) / len(self._recent_spec))
            self.episodes.append(self._open)
            self._recent_spec.clear()
        if speculated:
            self._recent_spec.append(accept_length)
            if self._open is not None:
                self._open.after.append(accept_length)
                if len(self._open.after) == WINDOW_STEPS:
                    self._open = None
        elif self._open is not None:
            self._open = None  # off again before the window filled: keep what was seen
        self._was_speculating = speculated

    def snapshot(self) -> dict:
        return {"reenables": self.reenables, "recent": [e.as_dict() for e in self.episodes]}
