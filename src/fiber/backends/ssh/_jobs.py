"""``fiber ps``, ``logs`` and ``stop`` on the ``ssh`` backend: the ssh jobs started from
this machine, whichever process started them, as the files of the master's machine say.
The files and their records: docs/contributing/processes.md,
"The ssh backend's ps, logs and stop"."""

from __future__ import annotations

import os
import shutil
import time
from typing import List, NamedTuple, Optional, Sequence

from ... import _machine
from ..._process_state import here
from ...errors import BackendError
from .._base import JobInfo
from .._common import signal_name

__all__ = ["program_dir", "new_log", "note_started", "note_ended", "read_log", "find_jobs",
           "remove_jobs", "prune", "KEEP_S"]

#: Seconds the logs of an ended program are kept after their last write.
KEEP_S = 24 * 3600.0


class _Record(NamedTuple):
    host: str
    pid: int
    start: Optional[int]
    ended: Optional[str]  # None while it runs: its exit code, "lost" or "?" once ended


def _root() -> str:
    return os.path.join(_machine.user_dir(), "ssh-logs")


def program_dir() -> str:
    """This program's folder of logs and records, made if missing (also where the ssh
    clients' own messages go, ``*.ssh``, each removed when its client has ended).

    Raises:
        OSError: it cannot be made.
    """
    program = _machine.program_id()
    directory = os.path.join(_root(), program)
    if not here.jobs.ssh_logs_checked:
        here.jobs.ssh_logs_checked = True
        prune()
        if program == str(here.pid):  # an earlier process with this pid is not us
            shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory, 0o700, exist_ok=True)
    return directory


def new_log(job_id: str, name: str) -> str:
    """The path of job ``job_id``'s log, made empty.

    Raises:
        OSError: the logs' folder cannot be written.
    """
    safe = "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name)[:100]
    path = os.path.join(program_dir(), f"{job_id}-{safe}.log")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600))
    return path


def _record_path(log_path: str) -> str:
    directory, name = os.path.split(log_path)
    return os.path.join(directory, "-".join(name.split("-")[:3]) + ".rec")


def _write(log_path: str, line: str) -> None:
    """Replace the record of ``log_path``'s job at once (a reader never sees half)."""
    try:
        _machine.write_private(_record_path(log_path), line + "\n")
    except OSError:
        pass


def note_started(log_path: str, host: str, pid: int) -> None:
    """Record the ssh client (``pid``) of the job whose log is ``log_path``, on ``host``."""
    start = _machine.process_start(pid)
    _write(log_path, f"{host} {pid} {'-' if start is None else start}")


def note_ended(log_path: str, exitcode: Optional[int], lost: bool = False) -> None:
    """Record how the job of ``log_path`` ended (its exit code, minus the signal that
    killed it; lost; or None: unknown)."""
    record = _read(log_path)
    if record is None:
        return
    code = "lost" if lost else "?" if exitcode is None else str(exitcode)
    _write(log_path, f"{record.host} {record.pid} "
                     f"{'-' if record.start is None else record.start} {code}")


def _read(log_path: str) -> Optional[_Record]:
    try:
        with open(_record_path(log_path)) as f:
            words = f.read().split()
        start = None if words[2] == "-" else int(words[2])
        return _Record(words[0], int(words[1]), start, words[3] if len(words) > 3 else None)
    except (OSError, ValueError, IndexError):
        return None


def _state(log_path: str) -> str:
    record = _read(log_path)
    if record is None:
        return "ended"  # it never started (it waited for a slot), or its record is lost
    if record.ended is None:
        if _machine.running(record.pid, record.start):
            return f"running on {record.host}"
        return "ended"  # its master was killed before it could say how
    if record.ended in ("lost", "?"):
        return "lost" if record.ended == "lost" else "ended"
    code = int(record.ended)
    return f"ended ({signal_name(-code)})" if code < 0 else f"ended (exit {code})"


def _logs(program: str = "", job_id: str = "") -> List[str]:
    found = []
    for prog in _listdir(_root()):
        if program and prog != program:
            continue
        directory = os.path.join(_root(), prog)
        found += [os.path.join(directory, n) for n in _listdir(directory)
                  if n.endswith(".log") and (not job_id or n.startswith(f"{job_id}-"))]
    return sorted(found, key=_machine.mtime)


def read_log(job_id: str, tail: Optional[int] = None) -> str:
    """The output of job ``job_id`` as its log has it.

    Raises:
        BackendError: no log of that job is kept on this machine.
    """
    found = _logs(job_id=job_id)
    if not found:
        raise BackendError(f"no log of an ssh job {job_id!r} on this machine (the logs "
                           "are kept where the program that started the job ran)")
    with open(found[-1], "rb") as f:
        text = f.read().decode("utf-8", "replace")
    if tail is not None:
        lines = text.splitlines(True)
        text = "".join(lines[-tail:] if tail > 0 else [])
    return text


def find_jobs(program: str = "") -> List[JobInfo]:
    """The ssh programs running here (their main processes) and the jobs whose logs are
    kept, oldest first."""
    prune()
    out = []
    for info in _machine.programs():
        if info.get("backend") != "ssh" or (program and info["program"] != program):
            continue
        command = " ".join(info.get("argv") or [])
        out.append(JobInfo(job_id=info["program"], program=info["program"],
                           name=f"main: {command}"[:200], state=f"running (pid {info['pid']})",
                           image="ssh"))
    for path in _logs(program=program):
        directory, filename = os.path.split(path)
        words = filename[:-len(".log")].split("-")
        state = _state(path)
        record = _read(path)
        created = _machine.iso(_machine.created_at(
            path, record.start if record is not None else None))
        out.append(JobInfo(job_id="-".join(words[:3]), program=os.path.basename(directory),
                           name="-".join(words[3:]), state=state, created=created,
                           ended=not state.startswith("running")))
    return out


def remove_jobs(program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
    """SIGTERM a program's main process and the ssh clients of its running jobs, or of the
    jobs named; the ids of those signalled."""
    removed = []
    for info in _machine.programs():
        if (program and info["program"] == program and info.get("backend") == "ssh"
                and _machine.terminate(info["pid"], info.get("start"))):
            removed.append(info["program"])
    paths = _logs(program=program) if program else [p for j in job_ids for p in _logs(job_id=j)]
    for path in paths:
        record = _read(path)
        if (record is not None and record.ended is None
                and _machine.terminate(record.pid, record.start)):
            removed.append("-".join(os.path.basename(path).split("-")[:3]))
    return removed


def prune(keep_s: float = KEEP_S) -> None:
    """Remove the logs and records of programs that have ended whose last write is older
    than ``keep_s`` seconds."""
    running = {info["program"] for info in _machine.programs()} | {_machine.program_id()}
    now = time.time()
    for program in _listdir(_root()):
        directory = os.path.join(_root(), program)
        if program in running:
            continue
        newest = max([_machine.mtime(os.path.join(directory, n)) for n in _listdir(directory)]
                     + [_machine.mtime(directory)])
        if now - newest > keep_s:
            shutil.rmtree(directory, ignore_errors=True)


def _listdir(path: str) -> List[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []
