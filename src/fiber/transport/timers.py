"""A server thread's timers: callbacks due at a time, soonest first.

`fiber.transport.server.Server.call_later` adds one; the server's thread sleeps
until the soonest (`Timers.timeout`) and runs those due (`Timers.due`). A
timer is cancelled in place (O(1)) and dropped when its time comes.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Callable, Iterator, List, Optional, Tuple

__all__ = ["Timer", "Timers"]


class Timer:
    """One callback due at ``when`` (monotonic seconds), unless cancelled first."""

    __slots__ = ("when", "fn", "cancelled")

    def __init__(self, when: float, fn: Callable[[], None]) -> None:
        self.when = when
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        """It will not run (it stays in the heap until its time comes)."""
        self.cancelled = True


class Timers:
    """A heap of `Timer`; used by one thread at a time (the server's lock)."""

    def __init__(self) -> None:
        self._heap: List[Tuple[float, int, Timer]] = []
        self._seq = itertools.count()  # ties run in the order they were added

    def add(self, delay: float, fn: Callable[[], None]) -> Timer:
        """A timer that runs ``fn`` ``delay`` seconds from now."""
        timer = Timer(time.monotonic() + delay, fn)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def timeout(self) -> Optional[float]:
        """Seconds until the soonest timer (0 if it is due), or None if there is none."""
        if not self._heap:
            return None
        return max(0.0, self._heap[0][0] - time.monotonic())

    def due(self) -> Iterator[Timer]:
        """The timers due now, taken out of the heap, cancelled ones left out."""
        now = time.monotonic()
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, timer = heapq.heappop(heap)
            if not timer.cancelled:
                yield timer
