"""This user's fiber programs on this machine, and what fiber keeps of them on disk: where
``fiber top``, ``ps``, ``logs`` and ``stop`` find them. The files hold the hub's secret and
are this user's alone. The layout: docs/contributing/processes.md,
"This user's programs on this machine"."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

from ._process_state import here

__all__ = ["user_dir", "program_id", "PROGRAM_ENV", "job_log", "find_job_logs", "mtime",
           "register_program", "programs", "ended_programs", "forget_program",
           "process_start", "started_at", "process_end", "running", "write_private",
           "terminate"]

#: The program id a local job inherits (its main process's pid).
PROGRAM_ENV = "FIBER_LOCAL_PROGRAM"


def user_dir() -> str:
    """``<temp dir>/fiber-<uid>``, made on first use (0700).

    Raises:
        PermissionError: it exists but is not this user's alone (someone else made it).
    """
    path = os.path.join(tempfile.gettempdir(), f"fiber-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path} is not a directory of this user's alone (mode "
                              f"{stat.filemode(st.st_mode)}, owner {st.st_uid}); remove it")
    return path


def _sub(*parts: str) -> str:
    path = os.path.join(user_dir(), *parts)
    os.makedirs(path, 0o700, exist_ok=True)
    return path


def program_id() -> str:
    """This program's id on this machine: its main process's pid."""
    return os.environ.get(PROGRAM_ENV) or str(here.pid)


def _stat(pid: int) -> Optional[List[bytes]]:
    """The fields of ``/proc/<pid>/stat`` after the command's name (the state is [0],
    field 3 of the whole line), or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(b")") + 2:].split()


def process_start(pid: int) -> Optional[int]:
    """When process ``pid`` started (clock ticks after boot), or None if there is none:
    with the pid, it names one process (a pid is reused, the pair is not). A process
    that has ended but not been waited for (a zombie) still has its start: see
    `process_end` for whether it runs."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])  # field 22 of the whole line


def started_at(start: int) -> float:
    """When a process whose start is ``start`` (see `process_start`) started, in seconds
    since the epoch: what ``fiber ps`` shows as its job's creation (a file's mtime tells
    its last write instead, which for a killed program's jobs is their end)."""
    booted = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)
    return booted + start / os.sysconf("SC_CLK_TCK")


def process_end(pid: int, start: Optional[int]) -> Tuple[bool, Optional[int]]:
    """Whether process ``(pid, start)`` has ended, and how when this machine still tells:
    its exit code, or minus the signal that killed it (as ``multiprocessing``), else None.

    A process that has ended stays in ``/proc`` as a zombie until its parent waits for
    it (a parent busy or stopped, or an init that never waits, as in many containers):
    it has ended all the same, and its exit status is still there (field 52, Linux 3.5).
    """
    fields = _stat(pid)
    if fields is None or start is None or int(fields[19]) != start:
        return True, None  # gone, or the pid is another process's now
    if fields[0] not in (b"Z", b"X"):
        return False, None
    try:
        return True, os.waitstatus_to_exitcode(int(fields[49]))
    except (IndexError, ValueError):
        return True, None


def running(pid: int, start: Optional[int]) -> bool:
    """Whether process ``(pid, start)`` runs (a zombie does not)."""
    return not process_end(pid, start)[0]


def terminate(pid: int, start: Optional[int]) -> bool:
    """SIGTERM to process ``(pid, start)`` if it still runs (``fiber stop``); whether it
    was sent."""
    if not running(pid, start):
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return False
    return True


def job_log(job_id: str, name: str) -> str:
    """The path of a local job's log (the file is the caller's to open)."""
    program = program_id()
    directory = os.path.join(user_dir(), "logs", program)
    if program == str(here.pid) and not here.api.machine_logs_checked:
        # logs of an earlier process that had this pid are not ours
        here.api.machine_logs_checked = True
        shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory, 0o700, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_.:" else "_" for c in name)[:100]
    return os.path.join(directory, f"{job_id}-{safe}.log")


def mtime(path: str) -> float:
    """When ``path`` was last written (0.0 if it is gone: another process may prune)."""
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def created_at(log_path: str, start: Optional[int]) -> float:
    """When a job was created, as ``fiber ps`` shows it: when its process started
    (``start``, see `process_start`), where its record says; its log's last write
    otherwise (a job never recorded as started ran briefly, if at all; for a killed
    program's job the log's last write is its end)."""
    return started_at(start) if start is not None else mtime(log_path)


def iso(when: float) -> str:
    """``when`` (seconds since the epoch) as ``fiber ps`` prints it: UTC, ISO 8601."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))


def _listdir(path: str) -> List[str]:
    try:
        return os.listdir(path)
    except OSError:  # not made yet, or pruned meanwhile
        return []


def find_job_logs(job_id: str = "", program: str = "") -> List[str]:
    """Paths of the local job logs kept, of ``program`` or of job ``job_id``, oldest first."""
    root = os.path.join(user_dir(), "logs")
    found = []
    for prog in sorted(_listdir(root)):
        if program and prog != program:
            continue
        directory = os.path.join(root, prog)
        for name in _listdir(directory):
            if name.endswith(".log") and (not job_id or name.startswith(f"{job_id}-")):
                found.append(os.path.join(directory, name))
    return sorted(found, key=mtime)


def register_program(address: str, secret: bytes, backend: str) -> Optional[str]:
    """Write this main process's program file (see the module's docstring); its path, or
    None when it cannot be written (fiber top then cannot find the program; it runs on)."""
    info = {"program": program_id(), "pid": here.pid, "start": process_start(here.pid),
            "argv": list(sys.argv), "cwd": os.getcwd(), "backend": backend,
            "address": address, "secret": secret.hex(), "python": sys.executable}
    try:
        path = os.path.join(_sub("programs"), f"{program_id()}.json")
        write_private(path, json.dumps(info))
    except OSError:
        return None
    forget_program(program_id())  # an earlier process's, with this pid
    if here.api.machine_program_file is None:
        atexit.register(_unregister)
    here.api.machine_program_file = path
    return path


def write_private(path: str, text: str) -> None:
    """Replace the file ``path`` with ``text`` at once (a reader never sees half of it),
    readable by this user alone.

    Raises:
        OSError: it cannot be written.
    """
    tmp = f"{path}.{here.pid}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _unregister() -> None:
    """At exit: this program's file becomes its ended file (it exited; how, an exit
    hook cannot tell)."""
    path = here.api.machine_program_file
    if path is not None:
        try:
            with open(path) as f:
                info = json.load(f)
        except (OSError, ValueError):
            return
        if info.get("pid") == here.pid:
            _note_ended(path, info, killed=False, exitcode=None)


def _note_ended(path: str, info: Dict[str, Any], killed: bool,
                exitcode: Optional[int]) -> None:
    """Replace the program file ``path`` (``info``) by the program's ended file: what
    ``fiber ps --all`` lists of it, without its hub's address and secret. ``killed``: its
    exit hooks did not run (a signal, or ``os._exit``); ``exitcode``: as `process_end`
    tells it, None when unknown."""
    kept = {k: v for k, v in info.items() if k not in ("address", "secret")}
    kept.update(killed=killed, exitcode=exitcode)
    try:
        write_private(_ended_path(info["program"]), json.dumps(kept))
    except (OSError, KeyError):
        pass
    try:
        os.unlink(path)
    except OSError:
        pass


def _ended_path(program: str) -> str:
    return os.path.join(user_dir(), "programs", f"{program}.ended.json")


def programs() -> List[Dict[str, Any]]:
    """The running fiber programs of this user on this machine (their program files),
    oldest first; the files of programs that are gone become their ended files."""
    directory = os.path.join(user_dir(), "programs")
    out = []
    for name in _listdir(directory):
        if not name.endswith(".json") or name.endswith(".ended.json"):
            continue
        path = os.path.join(directory, name)
        info = _load(path)
        if info is None:
            continue
        ended, code = process_end(int(info.get("pid", 0)), info.get("start"))
        if ended:  # killed before it could say so (a zombie still tells how)
            _note_ended(path, info, killed=True, exitcode=code)
            continue
        out.append(info)
    return sorted(out, key=lambda i: i.get("start") or 0)


def ended_programs() -> List[Dict[str, Any]]:
    """The ended files of this user's fiber programs on this machine (see `programs`,
    which makes those of killed programs), each with ``ended_at``: when it was written."""
    directory = os.path.join(user_dir(), "programs")
    out = []
    for name in _listdir(directory):
        path = os.path.join(directory, name)
        info = _load(path) if name.endswith(".ended.json") else None
        if info is not None and "program" in info:
            out.append({**info, "ended_at": mtime(path)})
    return out


def forget_program(program: str) -> None:
    """Remove the ended file of ``program``, if any (pruned, or its pid is reused)."""
    try:
        os.unlink(_ended_path(program))
    except OSError:
        pass


def _load(path: str) -> Optional[Dict[str, Any]]:
    """A program file's contents, or None (gone meanwhile, or half written by hand)."""
    try:
        with open(path) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None
