"""This program's live jobs as their clusters see them: how many each backend still has
queued and how many run (the dashboard's "jobs on the cluster").

fiber knows when a job connects; only the cluster knows that a job it has not started
yet waits in its queue (a Slurm job pending for resources, a pod not yet scheduled). So
this asks each backend of the program's live jobs, with one `Backend.status` call per
backend (one ``squeue``, one ``qstat``), at most every `MIN_INTERVAL_S` seconds, on the
caller's thread (the dashboard's, never the hub's): a page polled every second costs the
cluster's scheduler one query per backend every few seconds, not one a second.

Viewers outside the program (``fiber top``, ``fiber dashboard PID``) get `latest`, which
the hub's thread gives without waiting for a backend: the last counts, refreshed on a
thread of its own when they are older than `MIN_INTERVAL_S` (so only while somebody
looks).
"""

from __future__ import annotations

import threading
import time
from typing import Dict, List, Optional, Tuple

from .._core import _inspect
from .._process_state import here
from ..backends import Backend, JobHandle
from . import _process

__all__ = ["jobs", "latest", "MIN_INTERVAL_S"]

#: Seconds a count is reused before the backends are asked again.
MIN_INTERVAL_S = 5.0


def jobs() -> Dict[str, object]:
    """``{"jobs": {backend: {state: count}}, "errors": {backend: text}, "age_s": s}``:
    the live jobs this process started, by the state their backend gives (``pending``,
    ``running``; ``submitting`` for jobs not yet handed to the backend), as of ``age_s``
    seconds ago."""
    state = here.jobs
    with state.cluster_view_lock:
        when, view = state.cluster_view_last
        now = time.monotonic()
        if now - when >= MIN_INTERVAL_S:
            view = _ask()
            state.cluster_view_last = (now, view)
            when = now
        return {**view, "age_s": round(now - when, 1)}


def latest() -> Optional[Dict[str, object]]:
    """`jobs` as last asked, without waiting (for the hub's thread); asked anew on a
    thread of its own when older than `MIN_INTERVAL_S` and this process has live jobs.
    None before a first answer."""
    when, view = here.jobs.cluster_view_last
    now = time.monotonic()
    if now - when >= MIN_INTERVAL_S and _process.live_jobs() \
            and here.jobs.cluster_view_refreshing.acquire(blocking=False):
        try:
            threading.Thread(target=_refresh, name="fiber-cluster-view", daemon=True).start()
        except BaseException:
            here.jobs.cluster_view_refreshing.release()
            raise
    return {**view, "age_s": round(now - when, 1)} if view else None


def _refresh() -> None:
    try:
        jobs()
    finally:
        here.jobs.cluster_view_refreshing.release()


_inspect.add_field("cluster", latest)


def _ask() -> Dict[str, object]:
    groups: Dict[int, Tuple[Backend, List[JobHandle]]] = {}
    counts: Dict[str, Dict[str, int]] = {}
    errors: Dict[str, str] = {}
    for _proc, job in _process.live_jobs():
        if job is None or job.finished:
            continue
        name = job.backend.name
        if job.handle is None:
            states = counts.setdefault(name, {})
            states["submitting"] = states.get("submitting", 0) + 1
            continue
        groups.setdefault(id(job.backend), (job.backend, []))[1].append(job.handle)
    for backend, handles in groups.values():
        states = counts.setdefault(backend.name, {})
        try:
            found = backend.status(handles)
        except Exception as e:  # the cluster cannot be asked now: say so, count nothing
            errors[backend.name] = f"{type(e).__name__}: {e}"
            continue
        for handle in handles:
            status = found.get(handle.job_id)
            state = status.state.value if status is not None else "unknown"
            states[state] = states.get(state, 0) + 1
    return {"jobs": counts, "errors": errors}
