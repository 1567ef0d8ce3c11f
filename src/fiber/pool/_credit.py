"""How many tasks a pool worker may hold (its credit), and the round trip of its link,
measured from the traffic itself. The rules: docs/contributing/pools.md, "Credit"."""

from __future__ import annotations

import math
from typing import Dict, Generic, List, Optional, Protocol, Sequence, Sized, TypeVar

__all__ = ["HOLD_S", "MAX_CREDIT", "SLOW_S", "FAR_S", "SHARE", "MAX_FAR_CREDIT",
           "round_trip", "credit", "link_credit", "Link", "FarWorkers"]

HOLD_S = 0.002  # seconds of quick tasks a worker holds
MAX_CREDIT = 64
SLOW_S = 0.02  # tasks at least this long are not prefetched on a fast link
#: A link whose round trip is this or more is covered by credit of its own: another
#: site, a congested or shaped network (below it, `HOLD_S` of quick tasks covers it, and
#: a task of 100 ms or more loses at most a few percent). A cluster's links are well
#: below it.
FAR_S = 0.005
#: The share of a task's time that a round trip must reach to be covered.
SHARE = 0.05
MAX_FAR_CREDIT = 256
_SAMPLES = 5  # a link's round trip: the median of its last samples


def round_trip(sample: float, kernel: Optional[float]) -> float:
    """A round trip measured by the traffic (``sample``: results' arrival less the send
    and the tasks' time), bounded by TCP's own measure of the link (``kernel``, None
    where there is none): the smaller, since what the kernel did not see is time spent
    reading and writing in the processes, not on the link."""
    return sample if kernel is None else min(sample, kernel)


def credit(seconds: Optional[float], prefetch: int) -> int:
    """The credit of a worker on a fast link for tasks of ``seconds`` each (None: not
    measured yet)."""
    if seconds is None or seconds >= SLOW_S:
        return 1
    return max(prefetch + 1, min(MAX_CREDIT, int(HOLD_S / max(seconds, 1e-6))))


def link_credit(seconds: Optional[float], prefetch: int, rtt: float) -> int:
    """The credit of a worker whose link's round trip is ``rtt`` seconds: as `credit`,
    or, where the round trip is ``SHARE`` of a task or more, enough to cover it."""
    base = credit(seconds, prefetch)
    if seconds is None or rtt < SHARE * seconds:
        return base
    return max(base, min(MAX_FAR_CREDIT, 1 + math.ceil(rtt / max(seconds, 1e-6))))


class Link:
    """The measured round trip of one worker's link: the median of its last samples, so
    that one late answer (a pause of the master or the worker) does not count as a slow
    link, while a link that became slow is seen within three samples."""

    __slots__ = ("samples", "rtt")

    def __init__(self) -> None:
        self.samples: List[float] = []
        self.rtt = 0.0

    def observed(self, sample: float) -> float:
        """Count one round trip (seconds); returns the link's round trip now."""
        samples = self.samples
        samples.append(max(0.0, sample))
        if len(samples) > _SAMPLES:
            del samples[0]
        self.rtt = sorted(samples)[len(samples) // 2]
        return self.rtt


class Linked(Protocol):
    """What `FarWorkers` reads and sets of a worker (a pool's `WorkerState`)."""

    #: Its link's measured round trip (that of its job's connection, for a relayed one).
    link: Optional[Link]

    @property
    def pending(self) -> Sized:
        """The tasks it holds."""


W = TypeVar("W", bound=Linked)


class FarWorkers(Generic[W]):
    """The workers of a pool whose links are slow (``FAR_S`` or more), which the master
    tops up beyond the others' credit (``PoolService._dispatch_far``): usually none."""

    def __init__(self) -> None:
        self.workers: Dict[W, None] = {}  # in the order they came

    def __bool__(self) -> bool:
        return bool(self.workers)

    def observed(self, workers: Sequence[W], link: Link, sample: float) -> None:
        """A round trip ``sample`` of ``link``, the link of ``workers``: a worker's own, or
        the connection of a job of several, which relays its workers and is measured
        once a message. They join, or leave once it is fast again."""
        far = link.observed(sample) >= FAR_S
        for ws in workers:
            ws.link = link
            if far:
                self.workers[ws] = None
            else:
                self.workers.pop(ws, None)

    def forget(self, ws: W) -> None:
        """``ws`` is gone."""
        self.workers.pop(ws, None)

    def by_load(self) -> List[W]:
        """The far workers, the least loaded first."""
        return sorted(self.workers, key=lambda ws: len(ws.pending))

    def room(self, seconds: Optional[float], prefetch: int) -> int:
        """The tasks of ``seconds`` each they may hold in all. Read without the pool's
        lock (a stale figure only sizes one ``imap`` top-up)."""
        return sum(link_credit(seconds, prefetch, ws.link.rtt)
                   for ws in list(self.workers) if ws.link is not None)
