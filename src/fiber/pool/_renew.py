"""Workers renewed before a known end (a walltime, ``pool_worker_lifetime``): the
replacement starts first and the old worker retires at its hello. The rules:
docs/contributing/pools.md, "Renewal"."""

from __future__ import annotations

from typing import Any, Deque, Dict, Iterable, List, Optional, Tuple

from ._state import WorkerState

__all__ = ["RENEWED", "lifetime", "renew_at", "job_renew_at", "due", "by_job", "next_at", "said"]

#: The share of the lifetime over which renewals are spread.
_SPREAD = 0.15
_GOLDEN = 0.6180339887
#: ``WorkerState.renew_at`` of a worker whose place went to another already (renewed,
#: retiring or lost): it is not renewed, and frees no place again.
RENEWED = -1.0


def lifetime(worker_lifetime: float, time_limit: Optional[float],
             margin: float) -> Optional[float]:
    """Seconds after it connects that a worker is renewed: ``worker_lifetime`` (0:
    none), or ``margin`` (at most a third of it) before the backend's ``time_limit``,
    whichever comes first; None: never."""
    found = [worker_lifetime] if worker_lifetime > 0 else []
    if time_limit:
        found.append(time_limit - min(margin, time_limit / 3))
    return min(found) if found else None


def renew_at(connected: float, life: Optional[float], slot: int) -> float:
    """When the worker of ``slot``, connected at ``connected``, is renewed (0: never): in
    the last ``_SPREAD`` of its life, slots spread over it by the golden ratio."""
    if life is None:
        return 0.0
    return connected + life * (1 - _SPREAD * ((slot * _GOLDEN) % 1))


def job_renew_at(ws: WorkerState, now: float, life: Optional[float]) -> float:
    """When worker ``ws``, which said hello at ``now``, is renewed (0: never): its own
    lifetime from now, or, in a job of several, its job's (from the job's first hello,
    spread by the job's first slot)."""
    job = ws.job
    if job is None or not job.forks:
        return renew_at(now, life, ws.slot)
    if not job.renew_at:
        job.renew_at = renew_at(now, life, min(w.slot for w in job.workers))
    return float(job.renew_at)


def said(old: WorkerState, new: WorkerState) -> Optional[str]:
    """The INFO line of a renewal: one a worker, or one for a job of several (None for
    its other workers)."""
    if old.job is not None and old.job.forks:
        if old.job.renewed:
            return None
        old.job.renewed = True
        successor = new.job.process.name if new.job is not None else new.name
        return (f"{old.job.process.name} ({len(old.job.workers)} workers) is renewed "
                f"ahead of its known end: {successor} takes its place; its "
                "workers finish what they hold")
    return (f"{old.name} is renewed ahead of its job's known end: "
            f"{new.name} took its place; it finishes what it holds")


def by_job(workers: List[WorkerState]) -> List[List[WorkerState]]:
    """``workers`` (due for renewal) grouped by their job, in order: a job of several
    is renewed by one job."""
    groups: Dict[Any, List[Any]] = {}
    for ws in workers:
        groups.setdefault(ws.job if ws.job is not None else ws, []).append(ws)
    return list(groups.values())


def due(workers: List[WorkerState], now: float,
        free_slots: Deque[Tuple[int, int]]) -> List[WorkerState]:
    """The workers whose renewal is due at ``now``, each returned once; their places
    go first in ``free_slots`` (their replacements take them)."""
    found = [ws for ws in workers if 0 < ws.renew_at <= now
             and ws.connected and not (ws.retiring or ws.lost)]
    for ws in found:
        ws.renew_at = RENEWED  # (its end frees no place again: see `PoolService`)
        free_slots.appendleft((ws.slot, ws.restarts + 1))
    return found


def next_at(workers: Iterable[WorkerState]) -> Optional[float]:
    """When the next renewal of ``workers`` is due (monotonic), if any."""
    times = [ws.renew_at for ws in workers if ws.renew_at > 0]
    return min(times) if times else None
