"""An asyncio event loop on a clock of its own: whenever nothing is ready to run, its clock jumps
to the next timer instead of waiting for it. Coroutines that only sleep, time out and wait on
each other then run in no wall-clock time and in the same order on every machine, so a test can
assert on their times exactly. Work handed to an executor runs inline, at once; real I/O would
race the clock, so only the loop's own wake-ups may wait on a socket (when no timer is left)."""

from __future__ import annotations

import asyncio
import selectors
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Coroutine


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout=None):
        if timeout:  # the time to the loop's next timer: jump there, poll what is ready now
            self.now += timeout
            return super().select(0)
        return super().select(timeout)


class _InlineExecutor(ThreadPoolExecutor):
    """Runs each job as it is submitted (asyncio.to_thread's work, here)."""

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # handed to the awaiting coroutine, as a thread's would be
            future.set_exception(e)
        return future


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self._jumping = _JumpingSelector()
        super().__init__(self._jumping)
        self.set_default_executor(_InlineExecutor(max_workers=1))

    def time(self) -> float:
        return self._jumping.now


def run(coro: Coroutine) -> Any:
    """``asyncio.run`` on a VirtualTimeLoop whose clock starts at 0."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
