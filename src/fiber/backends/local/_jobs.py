"""``fiber ps``, ``logs`` and ``stop`` on the ``local`` backend: this user's fiber programs on
this machine and their jobs, whichever process started them, from the files of
`fiber._machine`. The records and their pruning: docs/contributing/processes.md,
"The local backend's ps, logs and stop"."""

from __future__ import annotations

import os
import signal
import time
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ... import _machine
from ...errors import BackendError
from .._base import JobInfo

__all__ = ["note_started", "note_ended", "find_jobs", "read_logs", "remove_jobs", "prune",
           "prune_due", "KEEP_JOBS", "KEEP_S", "PRUNE_EVERY_S"]

#: Ended jobs of ended programs whose records are kept at most (the newest).
KEEP_JOBS = 200
#: Seconds for which they are kept at most (since their last write: their end, mostly).
KEEP_S = 24 * 3600
#: Seconds between two prunings by the processes that record jobs (on this machine).
PRUNE_EVERY_S = 600.0
#: Records younger than this are kept whatever: a job being started has a log but no
#: record yet, and its program may not have written its program file yet.
_YOUNG_S = 60.0


class _Record(NamedTuple):
    """A job's record: its process, and how it ended once that is known."""

    pid: int
    start: Optional[int]  # None: it had ended before it was recorded
    ended: bool  # its end was recorded
    exitcode: Optional[int]  # as recorded (None: unknown)


def note_started(log_path: str, pid: int) -> None:
    """Record the pid of the job whose log is ``log_path`` (beside the log)."""
    start = _machine.process_start(pid)
    _write(log_path, f"{pid} {'-' if start is None else start}")


def note_ended(log_path: str, pid: int, exitcode: Optional[int]) -> None:
    """Record how the job of ``log_path`` (process ``pid``) ended: its exit code, minus
    the signal that killed it, or None (unknown). Written by the process that started
    it, which is told: another process (``fiber ps``) cannot learn it once the job's
    process has been waited for."""
    record = _read(log_path)
    start = record.start if record is not None and record.pid == pid else None
    code = "?" if exitcode is None else str(exitcode)
    _write(log_path, f"{pid} {'-' if start is None else start} {code}")


def _write(log_path: str, line: str) -> None:
    """Replace the record of ``log_path``'s job at once (a reader never sees half)."""
    try:
        _machine.write_private(_pid_path(log_path), line + "\n")
    except OSError:
        pass


def _read(log_path: str) -> Optional[_Record]:
    """The record of ``log_path``'s job, or None (not written yet, or unreadable)."""
    try:
        with open(_pid_path(log_path)) as f:
            words = f.read().split()
        pid = int(words[0])
        start = None if words[1] == "-" else int(words[1])
        if len(words) < 3:
            return _Record(pid, start, False, None)
        return _Record(pid, start, True, None if words[2] == "?" else int(words[2]))
    except (OSError, ValueError, IndexError):
        return None


def _pid_path(log_path: str) -> str:
    directory, name = os.path.split(log_path)
    job_id = "-".join(name.split("-")[:2])
    return os.path.join(directory, f"{job_id}.pid")


def _state(log_path: str) -> Tuple[Optional[_Record], str]:
    """(the job's record while it runs, else None; its state as ``fiber ps`` shows it)."""
    record = _read(log_path)
    if record is None:
        return None, "ended"  # never started (its start failed), or its record was lost
    if record.ended:
        return None, _ended(record.exitcode)
    ended, code = _machine.process_end(record.pid, record.start)
    if not ended:
        return record, f"running (pid {record.pid})"
    return None, _ended(code)


def _ended(exitcode: Optional[int]) -> str:
    """``ended (SIGKILL)``, ``ended (exit 1)``, or ``ended`` (how is not known)."""
    if exitcode is None:
        return "ended"
    if exitcode < 0:
        try:
            return f"ended ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"ended (signal {-exitcode})"
    return f"ended (exit {exitcode})"


def _parts(log_path: str) -> Tuple[str, str, str]:
    """(program, job id, name) of a job's log."""
    directory, filename = os.path.split(log_path)
    words = filename[:-len(".log")].split("-")
    return os.path.basename(directory), "-".join(words[:2]), "-".join(words[2:])


def prune_due() -> bool:
    """Whether the records were last pruned by a process recording jobs `PRUNE_EVERY_S`
    ago or more (a marker file's age); if so, the marker says now, and the caller prunes
    (two processes at once may both prune: harmless)."""
    marker = os.path.join(_machine.user_dir(), "logs", ".pruned")
    if time.time() - _machine.mtime(marker) < PRUNE_EVERY_S:
        return False
    try:
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))
        os.utime(marker)
    except OSError:  # no logs yet: nothing much to prune either
        pass
    return True


def prune(keep_jobs: int = KEEP_JOBS, keep_s: float = KEEP_S) -> List[str]:
    """Remove the log and record of each ended job of an ended program beyond the newest
    ``keep_jobs`` or older than ``keep_s`` seconds (see the module's docstring); the ids
    of the jobs removed. Several processes may prune at once: what another removed is
    skipped."""
    running = {info["program"] for info in _machine.programs()} | {_machine.program_id()}
    now = time.time()
    ended = []
    for path in _machine.find_job_logs():
        if os.path.basename(os.path.dirname(path)) in running:
            continue
        written = max(_machine.mtime(path), _machine.mtime(_pid_path(path)))
        if now - written >= _YOUNG_S and _state(path)[0] is None:
            ended.append((written, path))
    ended.sort(reverse=True)
    removed = []
    for i, (written, path) in enumerate(ended):
        if i >= keep_jobs or now - written > keep_s:
            for name in (path, _pid_path(path)):
                try:
                    os.unlink(name)
                except OSError:
                    pass
            removed.append(_parts(path)[1])
    for directory in {os.path.dirname(p) for _, p in ended}:
        try:
            os.rmdir(directory)  # an ended program's, once empty
        except OSError:
            pass
    _prune_programs(keep_jobs, keep_s, now)
    return removed


def _prune_programs(keep: int, keep_s: float, now: float) -> None:
    """Forget the ended programs (their rows) beyond the newest ``keep`` or ended more
    than ``keep_s`` seconds ago, as their jobs' records are."""
    ended = sorted(_machine.ended_programs(), key=lambda i: -i["ended_at"])
    for i, info in enumerate(ended):
        if i >= keep or now - info["ended_at"] > keep_s:
            _machine.forget_program(info["program"])


def find_jobs(program: str = "") -> List[JobInfo]:
    """The programs here (their main processes; those that have ended while their files
    are kept) and the jobs whose logs are kept, oldest first (after pruning the records
    of ended jobs: `prune`)."""
    prune()
    found = [_program(info, f"running (pid {info['pid']})") for info in _machine.programs()]
    found += [_program(info, _program_ended(info)) for info in _machine.ended_programs()]
    found = [(when, job) for when, job in found if not program or job.program == program]
    for path in _machine.find_job_logs(program=program):
        prog, job_id, name = _parts(path)
        running, state = _state(path)
        record = _read(path)
        when = _machine.created_at(path, record.start if record is not None else None)
        found.append((when, JobInfo(job_id=job_id, program=prog, name=name, state=state,
                                    created=_machine.iso(when), ended=running is None)))
    return [job for _, job in sorted(found, key=lambda pair: pair[0])]


def _program(info: Dict[str, Any], state: str) -> Tuple[float, JobInfo]:
    """(when it started, the row) of a program's main process, from its program file."""
    when = _machine.started_at(info["start"]) if info.get("start") is not None else 0.0
    command = " ".join(info.get("argv") or [])
    return when, JobInfo(job_id=info["program"], program=info["program"],
                         name=f"main: {command}"[:200], state=state,
                         created=_machine.iso(when) if when else "", image=info.get("backend", ""),
                         ended=not state.startswith("running"))


def _program_ended(info: Dict[str, Any]) -> str:
    """How an ended program ended: as a job's end when it was seen a zombie, ``ended
    (killed)`` when it ended without its exit hooks (a signal, or ``os._exit``), else
    ``ended`` (it exited; with which code, its exit hook could not tell)."""
    if info.get("exitcode") is not None:
        return _ended(info["exitcode"])
    return "ended (killed)" if info.get("killed") else "ended"


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
        if (program and info["program"] == program
                and _machine.terminate(info["pid"], info["start"])):
            removed.append(info["program"])
    for path in _machine.find_job_logs(program=program) if program else [
            p for j in job_ids for p in _machine.find_job_logs(job_id=j)]:
        running, _ = _state(path)
        if running is not None and _machine.terminate(running.pid, running.start):
            removed.append(_parts(path)[1])
    return removed


