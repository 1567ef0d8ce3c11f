"""Waits that grow while nothing changes, and start again short once something does.

fiber waits so in two ways, each with one set of constants here:

- `polling`: for a state that will change (a job's end, a file that grows, the cluster's
  status): from a short first wait, by half again, to a few seconds.
- `retrying`: for a service that does not answer (a cluster's API server, its commands):
  from half a second, doubling, to half a minute, so that an outage costs it little.

Imports nothing of fiber's.
"""

from __future__ import annotations

__all__ = ["Backoff", "polling", "retrying"]


class Backoff:
    """The next wait of a loop: ``first``, then ``factor`` times the last, at most
    ``most``; `reset` after progress."""

    __slots__ = ("first", "most", "factor", "delay")

    def __init__(self, first: float, most: float, factor: float) -> None:
        self.first, self.most, self.factor = first, most, factor
        self.delay = first

    def next(self) -> float:
        """The wait to take now (the following one is longer, up to ``most``)."""
        delay = self.delay
        self.delay = min(delay * self.factor, self.most)
        return delay

    def reset(self) -> None:
        """Something changed: the next wait is ``first`` again."""
        self.delay = self.first


def polling(first: float = 0.05, most: float = 2.0) -> Backoff:
    """Waits for a state that will change: ``first`` seconds, then half again each time."""
    return Backoff(first, most, 1.5)


def retrying(first: float = 0.5, most: float = 30.0) -> Backoff:
    """Waits between attempts to reach a service that does not answer: doubling."""
    return Backoff(first, most, 2.0)
