"""Tasks clearly late run again elsewhere (a backup copy), the first result kept; the
host of a silent worker is suspected and gets no new job. The rules:
docs/contributing/pools.md, "Late tasks and suspected hosts"."""

from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Tuple

from .._log import info
from ._state import Task, WorkerState

__all__ = ["CHECK_S", "LATE_MIN_S", "SUSPECT_S", "late_after", "overdue", "late_tasks",
           "pick_idle", "said", "silent", "suspected"]

#: Seconds between two checks for late tasks (while any could be copied).
CHECK_S = 0.25
#: A task is never late before it has run this long: below it, a pause of the master or
#: a worker (a collection, a busy CPU) is not a slow host.
LATE_MIN_S = 1.0
#: Seconds a host stays suspected after a silent worker there was lost (the default
#: ``heartbeat_timeout``: a cut that long may heal), unless a worker there is heard.
SUSPECT_S = 30.0


def late_after(seconds: Optional[float], factor: float, rtt: float) -> Optional[float]:
    """Seconds after which a task of ``seconds`` (its function's measured time; None:
    not measured) is late on a worker whose link's round trip is ``rtt``."""
    if seconds is None or factor <= 0:
        return None
    return max(LATE_MIN_S, factor * seconds) + rtt


def overdue(ws: WorkerState, task_seconds: Dict[int, float], factor: float,
            now: float) -> Optional[float]:
    """How long the task ``ws`` runs has run, as the master can tell (since it was handed
    it idle, or heard its last results), if that is past the task's lateness (see
    `late_after`); None if ``ws`` holds nothing or is not late."""
    if not ws.pending:
        return None
    running = next(iter(ws.pending.values()))
    limit = late_after(task_seconds.get(running.fid), factor,
                       ws.link.rtt if ws.link is not None else 0.0)
    ran = now - ws.since
    return ran if limit is not None and ran > limit else None


def silent(ws: WorkerState, task_seconds: Dict[int, float], factor: float,
           now: float) -> bool:
    """Whether ``ws`` holds a task and has not been heard for longer than its running
    task's lateness. (No message of a pool's tells a silent host from one running a long
    task: the lateness is measured against its function's time.)"""
    return overdue(ws, task_seconds, factor, now) is not None


def late_tasks(workers: List[WorkerState], task_seconds: Dict[int, float], factor: float,
               now: float) -> List[Tuple[Task, WorkerState, float]]:
    """The late tasks that may be copied, each with its holder and how long the task
    its holder runs has run. The tasks held behind a late one come first: they are late
    for certain, while the one running may just be long (and may wait for them: its copy
    would wait too); then the longest late first, a worker's tasks in their order."""
    late: List[Tuple[bool, float, Task, WorkerState]] = []
    for ws in workers:
        if not ws.pending or ws.lost:
            continue  # (most workers, at a round's end: no call for them)
        ran = overdue(ws, task_seconds, factor, now)
        if ran is None:
            continue
        late.extend((i == 0, -ran, task, ws) for i, task in enumerate(ws.pending.values())
                    if task.held_by == 1 and not task.done and not task.suspect)
    late.sort(key=lambda entry: entry[:2])  # stable: a worker's tasks stay in order
    return [(task, ws, -ran) for _, ran, task, ws in late]


def pick_idle(idle: List[WorkerState], holder: WorkerState) -> Optional[WorkerState]:
    """An idle worker for a copy of a task ``holder`` holds: on another host if one
    idles there (the holder's host may be what is slow), else any."""
    if not idle:
        return None
    host = holder.process.host
    for i, ws in enumerate(idle):
        if not host or ws.process.host != host:
            return idle.pop(i)
    return idle.pop()


def said(task: Task, holder: WorkerState, ran: float, seconds: Optional[float],
         copy: WorkerState) -> None:
    """One INFO line a copy: which task, where it was late, where it runs again."""
    info("%s is late on %s (%s: its worker's task has run %.1f s, its tasks take %s): "
         "run again on %s; the first result is kept", task.label, holder.name,
         holder.process.host or "its host", ran,
         "?" if seconds is None else f"{seconds * 1000:.0f} ms", copy.name)


def suspected(workers: List[WorkerState], suspects: Dict[str, float],
              task_seconds: Dict[int, float], factor: float, now: float) -> FrozenSet[str]:
    """Hosts to place no new worker on: those of silent workers, and those of
    ``suspects`` (host: until when, a silent worker there lost) not expired (dropped)."""
    for host in [h for h, until in suspects.items() if until <= now]:
        del suspects[host]
    silent_hosts = {ws.process.host for ws in workers
                    if silent(ws, task_seconds, factor, now)}
    return frozenset(h for h in silent_hosts | set(suspects) if h)
