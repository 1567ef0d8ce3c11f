"""``fiber ps``, ``logs`` and ``stop`` on the ``local`` backend: this user's fiber programs on
this machine and their jobs, whichever process started them.

What is listed comes from the files of :mod:`fiber._machine`: a program is its main
process's program file (written while it runs); a job is its log file, with a pid file
beside it (``<job>.pid``: its pid and start, written when it is started) that tells
whether it still runs. A pid is trusted only with its start time, so a pid reused by
another process is never signalled.
"""

from __future__ import annotations

import os
import signal
import time
from typing import List, Optional, Sequence, Tuple

from ... import _machine
from ...errors import BackendError
from .._base import JobInfo

__all__ = ["note_started", "find_jobs", "read_logs", "remove_jobs"]


def note_started(log_path: str, pid: int) -> None:
    """Record the pid of the job whose log is ``log_path`` (beside the log)."""
    start = _machine.process_start(pid)
    try:
        with open(_pid_path(log_path), "w") as f:
            f.write(f"{pid} {start}\n")
    except OSError:
        pass


def _pid_path(log_path: str) -> str:
    directory, name = os.path.split(log_path)
    job_id = "-".join(name.split("-")[:2])
    return os.path.join(directory, f"{job_id}.pid")


def _alive(log_path: str) -> Optional[int]:
    """The job's pid while it runs, else None."""
    try:
        with open(_pid_path(log_path)) as f:
            pid_text, start_text = f.read().split()
    except (OSError, ValueError):
        return None
    pid = int(pid_text)
    return pid if str(_machine.process_start(pid)) == start_text else None


def _parts(log_path: str) -> Tuple[str, str, str]:
    """(program, job id, name) of a job's log."""
    directory, filename = os.path.split(log_path)
    words = filename[:-len(".log")].split("-")
    return os.path.basename(directory), "-".join(words[:2]), "-".join(words[2:])


def _created(path: str) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.stat(path).st_mtime))


def find_jobs(program: str = "") -> List[JobInfo]:
    """The programs running here (their main processes) and the jobs whose logs are
    kept, oldest first."""
    out = []
    for info in _machine.programs():
        if program and info["program"] != program:
            continue
        command = " ".join(info.get("argv") or [])
        out.append(JobInfo(job_id=info["program"], program=info["program"],
                           name=f"main: {command}"[:200],
                           state=f"running (pid {info['pid']})", created="",
                           image=info.get("backend", "")))
    for path in _machine.find_job_logs(program=program):
        prog, job_id, name = _parts(path)
        pid = _alive(path)
        state = f"running (pid {pid})" if pid is not None else "ended"
        out.append(JobInfo(job_id=job_id, program=prog, name=name, state=state,
                           created=_created(path)))
    return out


def read_logs(job_id: str, tail: Optional[int] = None) -> str:
    """A local job's output, as its log file has it.

    Raises:
        BackendError: no log of that job is kept here.
    """
    paths = _machine.find_job_logs(job_id=job_id)
    if not paths:
        raise BackendError(f"no log of a local job {job_id!r} (fiber ps -b local lists "
                           "the jobs whose logs are kept)")
    with open(paths[-1], "rb") as f:
        text = f.read().decode("utf-8", "replace")
    if tail is not None:
        lines = text.splitlines(True)
        text = "".join(lines[-tail:] if tail > 0 else [])
    return text


def remove_jobs(program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
    """SIGTERM a program's main process and its running jobs, or the jobs named; the ids
    of those signalled (a program's jobs end by themselves when it does: their lifeline
    to it closes)."""
    removed = []
    for info in _machine.programs():
        if program and info["program"] == program and _signal(info["pid"], info["start"]):
            removed.append(info["program"])
    for path in _machine.find_job_logs(program=program) if program else [
            p for j in job_ids for p in _machine.find_job_logs(job_id=j)]:
        pid = _alive(path)
        if pid is not None and _signal(pid, _machine.process_start(pid)):
            removed.append(_parts(path)[1])
    return removed


def _signal(pid: int, start: Optional[int]) -> bool:
    if start is None or _machine.process_start(pid) != start:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return False
    return True
