"""The ``local`` backend: every job is a process on this machine. The default.

A job running fiber's bootstrap with this interpreter is forked by the *fork server* (see
:mod:`fiber.backends._forkserver`), a template process started with the first such job
that has fiber and the master's packages imported already; every other job, and every job
when the fork server is disabled (config ``local_fork_server``) or cannot work, is a
subprocess. Both kinds behave alike for ``status``, ``wait`` and ``cancel``.

Job exits are seen at once: one watcher thread waits on a pidfd per subprocess (Linux) and
is woken by the fork server's exit reports; it falls back to polling elsewhere.
``@fiber.meta`` resources are recorded but not enforced: a laptop has no scheduler to
honour them.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import select
import signal
import subprocess
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple, Union

from ..config import get_config
from ..errors import SubmitError
from . import _forkserver
from ._base import Backend, ExitCallback, JobHandle, JobSpec, JobState, JobStatus, JobWatcher
from ._command import bootstrap_parts, interpreter_flags
from ._forkserver import ForkedJob, ForkServerError

__all__ = ["LocalBackend"]


def _status_of(returncode: Optional[int]) -> JobStatus:
    if returncode is None:
        return JobStatus(JobState.RUNNING)
    if returncode == 0:
        return JobStatus(JobState.SUCCEEDED, 0)
    if returncode < 0:
        try:
            reason = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            reason = f"killed by signal {-returncode}"
        return JobStatus(JobState.FAILED, returncode, reason)
    return JobStatus(JobState.FAILED, returncode, f"exit code {returncode}")


_Proc = Union["subprocess.Popen[bytes]", ForkedJob]


def _current_status(proc: _Proc) -> JobStatus:
    if isinstance(proc, ForkedJob):
        if proc.lost_reason:
            return JobStatus(JobState.LOST, None, proc.lost_reason)
        return _status_of(proc.returncode)
    return _status_of(proc.poll())


_noted: set = set()


def _note_once(message: str) -> None:
    if message not in _noted:
        _noted.add(message)
        sys.stderr.write(f"fiber: {message}\n")
        sys.stderr.flush()


class LocalBackend(Backend):
    """Run jobs as subprocesses on this machine."""

    name = "local"
    jobs_share_host = True

    def __init__(self) -> None:
        self._procs: Dict[str, _Proc] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def command_prefix(self, spec: JobSpec, index: int) -> List[str]:
        """Words put before a job's command; subclasses use it to place jobs elsewhere."""
        return []

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        handles = []
        for spec in specs:
            index = next(self._ids)
            prefix = self.command_prefix(spec, index)
            argv = prefix + list(spec.command)
            env = dict(os.environ)
            env.update(spec.env)
            proc: Optional[_Proc] = None if prefix else self._fork(argv, env)
            if proc is None:
                try:
                    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                            close_fds=True)
                except OSError as e:
                    raise SubmitError(f"cannot start local job: {e}", command=argv) from e
            job_id = f"{os.getpid()}-{index}"
            with self._lock:
                self._procs[job_id] = proc
            handles.append(JobHandle(job_id, self.name, host="localhost", pid=proc.pid))
        return handles

    def _fork(self, argv: List[str], env: Dict[str, str]) -> Optional[ForkedJob]:
        """The job forked by the fork server, or None: start it as a subprocess."""
        # The template runs this interpreter with this process's flags: a job asking for
        # another interpreter or other flags is a subprocess.
        parts = bootstrap_parts(argv)
        if (parts is None or not _forkserver.supported()
                or os.path.abspath(parts[0]) != os.path.abspath(sys.executable)
                or list(parts[1]) != interpreter_flags()):
            return None
        cfg = get_config()
        if not cfg.local_fork_server:
            return None
        try:
            server = _forkserver.get_server(sys.executable, cfg.local_preload)
        except ForkServerError as e:
            _note_once(f"{e}; local jobs start as subprocesses")
            return None
        if cfg.debug and server.preload_failures:
            _note_once(f"the fork server could not preload {server.preload_failures}")
        try:
            cwd: Optional[str] = os.getcwd()
        except OSError:
            cwd = None
        try:
            return server.fork(argv, env, cwd, self._forked_job_ended)
        except ForkServerError as e:
            _note_once(f"{e}; this job starts as a subprocess")
            return None

    def _forked_job_ended(self) -> None:
        """A forked job's exit was reported (on the fork server's reader thread)."""
        w = self.__dict__.get("_watcher")
        if isinstance(w, _PidfdWatcher):
            w._wake()
        elif w is not None:
            with w._cond:
                w._reset = True
                w._cond.notify()

    def _proc(self, handle: JobHandle) -> Optional[_Proc]:
        with self._lock:
            return self._procs.get(handle.job_id)

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        out = {}
        for h in handles:
            proc = self._proc(h)
            out[h.job_id] = (
                JobStatus(JobState.LOST, None, "unknown job") if proc is None
                else _current_status(proc)
            )
        return out

    def wait(self, handle: JobHandle, timeout: Optional[float] = None) -> Optional[JobStatus]:
        proc = self._proc(handle)
        if proc is None:
            return JobStatus(JobState.LOST, None, "unknown job")
        if isinstance(proc, ForkedJob):
            return _current_status(proc) if proc.wait(timeout) else None
        try:
            return _status_of(proc.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        for h in handles:
            proc = self._proc(h)
            if proc is not None and not _current_status(proc).state.finished:
                try:
                    proc.send_signal(signal.SIGKILL if force else signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def listen_host(self) -> str:
        return "127.0.0.1"

    def main_spec(self, spec: JobSpec) -> JobSpec:
        """A main program here runs on this machine: it keeps this machine's listen_host."""
        host = get_config().listen_host
        return dataclasses.replace(spec, env={**spec.env, "FIBER_LISTEN_HOST": host})

    def release(self, handle: JobHandle) -> None:
        with self._lock:
            proc = self._procs.get(handle.job_id)
            if proc is not None and _current_status(proc).state.finished:
                del self._procs[handle.job_id]

    def watcher(self) -> JobWatcher:
        if not hasattr(os, "pidfd_open"):
            return super().watcher()
        w = self.__dict__.get("_watcher")
        if w is None:
            with self._lock:
                w = self.__dict__.setdefault("_watcher", _PidfdWatcher(self))
        return w


class _PidfdWatcher(JobWatcher):
    """Sees each child's exit the moment it happens, via pidfds and ``select``."""

    def __init__(self, backend: LocalBackend) -> None:
        super().__init__(backend)
        self._local = backend
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    def watch(self, handle, on_exit) -> None:  # type: ignore[no-untyped-def]
        super().watch(handle, on_exit)
        self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
        self._wake()
        super().stop()

    def _deliver_ended(self, jobs: Dict[str, Tuple[JobHandle, ExitCallback]]) -> None:
        """Call back (and drop from ``jobs``) the jobs that ended. A method of its own: a
        delivered callback holds its process object, which must not stay referenced by
        ``_run``'s locals while it waits."""
        for job_id, (handle, on_exit) in list(jobs.items()):
            proc = self._local._proc(handle)
            status = (JobStatus(JobState.LOST, None, "unknown job") if proc is None
                      else _current_status(proc))
            if status.state.finished:
                with self._cond:
                    self._jobs.pop(job_id, None)
                del jobs[job_id]
                on_exit(handle, status)

    def _run(self) -> None:
        # Each round checks the jobs of a fresh snapshot *before* waiting: a job watched,
        # or a forked job reported, while we waited is seen in the next round (the wake
        # byte that announced it ends the wait), never one wait later.
        fds: Dict[str, int] = {}
        try:
            while True:
                with self._cond:
                    if self._stopped:
                        return
                    jobs = dict(self._jobs)
                self._deliver_ended(jobs)
                for job_id in set(fds) - set(jobs):
                    os.close(fds.pop(job_id))
                for job_id, (handle, _) in jobs.items():
                    if job_id not in fds and handle.pid is not None:
                        if isinstance(self._local._proc(handle), ForkedJob):
                            continue  # no pidfd: the fork server's exit report wakes us
                        try:
                            fds[job_id] = os.pidfd_open(handle.pid)  # type: ignore[attr-defined]
                        except ProcessLookupError:
                            fds[job_id] = os.open(os.devnull, os.O_RDONLY)  # already reaped
                ready, _, _ = select.select([self._wake_r, *fds.values()], [], [], 1.0)
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)
        finally:
            for fd in fds.values():
                os.close(fd)
            os.close(self._wake_r)
            os.close(self._wake_w)
