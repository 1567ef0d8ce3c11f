"""The ``local`` backend: every job is a subprocess of this process. The default.

Job exits are seen at once: one watcher thread waits on a pidfd per child (Linux) and
falls back to polling elsewhere. ``@fiber.meta`` resources are recorded but not enforced:
a laptop has no scheduler to honour them.
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import subprocess
import threading
from typing import Dict, List, Optional, Sequence

from ..errors import SubmitError
from ._base import Backend, JobHandle, JobSpec, JobState, JobStatus, JobWatcher

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


class LocalBackend(Backend):
    """Run jobs as subprocesses on this machine."""

    name = "local"

    def __init__(self) -> None:
        self._procs: Dict[str, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def command_prefix(self, spec: JobSpec, index: int) -> List[str]:
        """Words put before a job's command; subclasses use it to place jobs elsewhere."""
        return []

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        handles = []
        for spec in specs:
            index = next(self._ids)
            argv = self.command_prefix(spec, index) + list(spec.command)
            env = dict(os.environ)
            env.update(spec.env)
            try:
                proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, close_fds=True)
            except OSError as e:
                raise SubmitError(f"cannot start local job: {e}", command=argv) from e
            job_id = f"{os.getpid()}-{index}"
            with self._lock:
                self._procs[job_id] = proc
            handles.append(JobHandle(job_id, self.name, host="localhost", pid=proc.pid))
        return handles

    def _proc(self, handle: JobHandle) -> Optional[subprocess.Popen]:
        with self._lock:
            return self._procs.get(handle.job_id)

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        out = {}
        for h in handles:
            proc = self._proc(h)
            out[h.job_id] = (
                JobStatus(JobState.LOST, None, "unknown job") if proc is None
                else _status_of(proc.poll())
            )
        return out

    def wait(self, handle: JobHandle, timeout: Optional[float] = None) -> Optional[JobStatus]:
        proc = self._proc(handle)
        if proc is None:
            return JobStatus(JobState.LOST, None, "unknown job")
        try:
            return _status_of(proc.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        for h in handles:
            proc = self._proc(h)
            if proc is not None and proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGKILL if force else signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def listen_host(self) -> str:
        return "127.0.0.1"

    def forget(self, handle: JobHandle) -> None:
        """Drop a finished job's bookkeeping."""
        with self._lock:
            self._procs.pop(handle.job_id, None)

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

    def _run(self) -> None:
        fds: Dict[str, int] = {}
        try:
            while True:
                with self._cond:
                    if self._stopped:
                        return
                    jobs = dict(self._jobs)
                for job_id in set(fds) - set(jobs):
                    os.close(fds.pop(job_id))
                for job_id, (handle, _) in jobs.items():
                    if job_id not in fds and handle.pid is not None:
                        try:
                            fds[job_id] = os.pidfd_open(handle.pid)  # type: ignore[attr-defined]
                        except ProcessLookupError:
                            fds[job_id] = os.open(os.devnull, os.O_RDONLY)  # already reaped
                ready, _, _ = select.select([self._wake_r, *fds.values()], [], [], 1.0)
                if self._wake_r in ready:
                    os.read(self._wake_r, 4096)
                for job_id, (handle, on_exit) in jobs.items():
                    proc = self._local._proc(handle)
                    code = proc.poll() if proc is not None else None
                    if proc is None or code is not None:
                        with self._cond:
                            self._jobs.pop(job_id, None)
                        if job_id in fds:
                            os.close(fds.pop(job_id))
                        on_exit(handle, _status_of(code) if proc is not None
                                else JobStatus(JobState.LOST, None, "unknown job"))
        finally:
            for fd in fds.values():
                os.close(fd)
            os.close(self._wake_r)
            os.close(self._wake_w)
