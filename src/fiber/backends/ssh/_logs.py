"""The ssh jobs' logs, kept on the master's machine (``fiber logs -b ssh JOB``).

    <temp dir>/fiber-<uid>/ssh-logs/<program>/<job id>-<name>.log     0600, this user's

A job's output comes to the master through its ssh session: the master's hub appends
what it reads of the job's pipes to the log (``JobOutput.log_path``), or, with
``forward_output`` off, the ssh client writes there itself. The logs of a program that
has ended are removed a day after their last write, by the next program's first job.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import List, Optional

from ... import _machine
from ...errors import BackendError

__all__ = ["new_log", "read_log", "prune", "KEEP_S"]

#: Seconds the logs of an ended program are kept after their last write.
KEEP_S = 24 * 3600.0

_checked = False


def _root() -> str:
    return os.path.join(_machine.user_dir(), "ssh-logs")


def new_log(job_id: str, name: str) -> str:
    """The path of job ``job_id``'s log, made empty.

    Raises:
        OSError: the logs' folder cannot be written.
    """
    global _checked
    program = _machine.program_id()
    directory = os.path.join(_root(), program)
    if not _checked:
        _checked = True
        prune()
        if program == str(os.getpid()):  # an earlier process with this pid is not us
            shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory, 0o700, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name)[:100]
    path = os.path.join(directory, f"{job_id}-{safe}.log")
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600))
    return path


def read_log(job_id: str, tail: Optional[int] = None) -> str:
    """The output of job ``job_id`` as its log has it.

    Raises:
        BackendError: no log of that job is kept on this machine.
    """
    found = []
    for program in _listdir(_root()):
        directory = os.path.join(_root(), program)
        found += [os.path.join(directory, n) for n in _listdir(directory)
                  if n.startswith(f"{job_id}-") and n.endswith(".log")]
    if not found:
        raise BackendError(f"no log of an ssh job {job_id!r} on this machine (the logs "
                           "are kept where the program that started the job ran)")
    with open(found[-1], "rb") as f:
        text = f.read().decode("utf-8", "replace")
    if tail is not None:
        lines = text.splitlines(True)
        text = "".join(lines[-tail:] if tail > 0 else [])
    return text


def prune(keep_s: float = KEEP_S) -> None:
    """Remove the logs of programs that have ended whose last write is older than
    ``keep_s`` seconds."""
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
