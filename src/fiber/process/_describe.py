"""Processes as people read them: ``repr(Process)`` and the children ``fiber top`` lists."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .._core._inspect import Counted, Rows

__all__ = ["process_repr", "children", "exit_code_of"]


def _state(code: Optional[int], connected: bool) -> str:
    """"started" (or "starting" before the job connected), "stopped exitcode=-SIGKILL"."""
    if code is None:
        return "started" if connected else "starting"
    if code < 0:
        try:
            return f"stopped exitcode=-{signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"stopped exitcode={code}"


def process_repr(kind: str, name: str, job: Any, code: Optional[int], parent_pid: int,
                 ident: Optional[int], closed: bool, daemon: bool) -> str:
    """``<Process name=... pid=... parent=... job=... host=... state [daemon]>`` of a
    process whose job record (`Job`) is ``job``."""
    parts = [f"name={name!r}"]  # multiprocessing's order: name, pid, parent, state
    if closed:
        parts += [f"parent={parent_pid}", "closed"]
    elif job is None:
        parts += [f"parent={parent_pid}", "initial"]
    else:
        pid = job.remote_pid if job.remote_pid is not None else ident
        parts += [f"pid={pid}", f"parent={parent_pid}"]
        if job.handle is not None:
            parts.append(f"job={job.handle.job_id}")
        if job.remote_host:
            parts.append(f"host={job.remote_host}")
        parts.append(_state(code, job.remote_pid is not None))
    if daemon:
        parts.append("daemon")
    return f"<{kind} {' '.join(parts)}>"


def children(procs: List[Tuple[Any, Any]], rows: Optional[Rows] = None) -> Counted:
    """A process's children that have a job, as fiber top shows them (plain values):
    with ``rows`` (a viewer's, see `fiber._core._inspect.rows_shown`) only the first
    ``rows[1]`` are built, and every one is counted by state (``processes_total``,
    ``process_states``). A dashboard's page shows 100 of a Pool(1024)'s children,
    /metrics none: a record each cost a poll 2-4 ms of the master's CPU, and so did a
    loop that counted each child's state (the count is two list comprehensions)."""
    jobs = [job for _, job in procs if job is not None and job.handle is not None]
    ended = [job for job in jobs if job.finished]  # few: a pool's workers run
    states = {"running": len(jobs) - len(ended)} if len(jobs) > len(ended) else {}
    for job in ended:
        state = _child_state(job)
        states[state] = states.get(state, 0) + 1
    shown = len(procs) if rows is None else rows[1]
    now = time.monotonic()
    out: List[Dict[str, Any]] = []
    for child, job in procs:
        if len(out) >= shown:
            break
        if job is not None and job.handle is not None:
            out.append({"name": child.name, "job_id": job.handle.job_id,
                        "host": job.remote_host, "pid": child.ident,
                        "state": _child_state(job), "daemon": child.daemon,
                        "running_s": round(now - job.started_at, 1)})
    return Counted(out, {"processes_total": len(jobs), "process_states": states})


def _child_state(job: Any) -> str:
    """``running``, or ``exit code N`` (fiber top's words)."""
    code = job.exitcode() if job.finished else None
    return "running" if code is None else f"exit code {code}"


def exit_code_of(e: SystemExit) -> int:
    """The exit code a process's ``sys.exit(...)`` gives, as Python's own exit does (a
    message is written to stderr, and is exit code 1)."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    sys.stderr.write(str(e.code) + "\n")
    return 1
