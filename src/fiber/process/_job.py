"""The parent's record of one started process: its job, its sentinel, how it ended.

A `Job` is made when a `Process` is prepared for launch and
is never pickled. The backend's watcher calls `Job.finish` with the job's final
status; ``sentinel_r`` becomes readable (EOF) then, and what the job was handed but may
never have taken is released.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from typing import Callable, List, Optional

from .._log import log, warn
from .._process_state import here
from ..backends import Backend, JobHandle, JobState, JobStatus
from ..config import get_config
from . import _launcher

__all__ = ["Job", "collect", "release_collected", "describe_end", "say_end", "end_said_elsewhere"]


def describe_end(code: Optional[int], reason: str) -> str:
    """"killed by SIGTERM: Slurm TIMEOUT", "exit code 1", ...: a job's end in a user's
    words, from its exit code (None: not known) and what its backend said of it."""
    if code is None:
        text = "still running or unknown (lost contact)"
    elif code < 0:
        try:
            text = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            text = f"killed by signal {-code}"
    else:
        text = f"exit code {code}"
    if not reason:
        return text
    if code is None:
        return reason
    # a reason that states the exit already ("Slurm FAILED: killed by SIGKILL") says it alone
    return reason if re.search(rf"{re.escape(text)}\b", reason) else f"{text}: {reason}"


def end_said_elsewhere(process: object) -> None:
    """``process``'s end is its owner's to tell (not started yet)."""
    here.jobs.ends_said_elsewhere.add(process)


def say_end(process: object, name: str, job: Job, status: JobStatus) -> None:
    """Log a process's end; on stderr, what its own traceback could not say: that the
    cluster never ran its job, or ended it (a time limit, preemption, eviction...), and
    why. An end that the process's code made, or that fiber asked for, is only logged,
    as multiprocessing says nothing of it."""
    if job.cancel_requested:
        log("%s ended as asked (terminate/kill): %s", name, status.reason or status.state.value)
        return
    log("%s ended: %s%s", name, status.state.value, f" ({status.reason})" if status.reason else "")
    if process in here.jobs.ends_said_elsewhere:
        return
    if (status.state is JobState.FAILED and status.exitcode is None
            and job.remote_pid is None and status.reason):
        # the cluster never ran it (bad image, no node fits...)
        sys.stderr.write(f"fiber: the job of {name} failed before it started: "
                         f"{status.reason}\n")
    elif _ended_from_outside(status, job.reported):
        warn("%s (job %s) was ended by its cluster or a signal, not by its code: %s", name,
             _where(job), describe_end(status.exitcode, status.reason))


def _where(job: Job) -> str:
    """"4711 on node2": the job's id, and its host once it said."""
    where = job.handle.job_id if job.handle is not None else "?"
    return f"{where} on {job.remote_host}" if job.remote_host else where


def say_lost_contact(process: object, name: str, job: Job) -> None:
    """Warn that a running process was lost: its host did not answer for
    ``heartbeat_timeout`` seconds. A job cut off from the program's main process ends
    itself (see `fiber.process._bootstrap`), so its end will read "exit code 1": this
    line says why, which nothing else here could (its own last words are in its job's
    log, not on this terminal)."""
    if job.reported is not None or job.cancel_requested \
            or process in here.jobs.ends_said_elsewhere:
        return
    warn("%s (job %s) is lost: its host has not answered for %g s (heartbeat_timeout), "
         "and a job cut off from the program's main process ends itself", name, _where(job),
         get_config().heartbeat_timeout)


def _ended_from_outside(status: JobStatus, reported: Optional[int]) -> bool:
    """Whether a job's end was most likely its cluster's doing (a time limit, preemption,
    eviction, a node's failure, the OOM killer, a person's cancel), not its code's: the
    job did not report an exit of its own (``reported``), and its backend said more of a
    cancel, a loss or a signal than the signal alone (a local job killed by a signal: no
    cluster, and multiprocessing says nothing of it either)."""
    if reported is not None or not status.reason:
        return False
    if status.state in (JobState.CANCELLED, JobState.LOST):
        return True
    code = status.exitcode
    return code is not None and code < 0 and status.reason != describe_end(code, "")


def collect(job: Job) -> None:
    """A started Process object was collected (it may be inside garbage collection)."""
    job.close_sentinel()
    assert job.handle is not None
    # (inside garbage collection while this thread may hold a backend's lock: it only
    # appends, lock-free, and the next start releases them)
    here.jobs.collected_jobs.append((job.backend, job.handle))


def release_collected() -> None:
    collected = here.jobs.collected_jobs
    while collected:
        try:
            backend, handle = collected.popleft()
        except IndexError:  # another thread took the last one
            return
        backend.release(handle)


class Job:
    """The parent's runtime state of one started process (never pickled)."""

    def __init__(self, backend: Backend, token: bytes,
                 handoffs: List[Callable[[], None]]) -> None:
        self.backend = backend
        self.token = token
        self.handoffs = handoffs
        self.handle: Optional[JobHandle] = None
        self.status: Optional[JobStatus] = None
        self.reported: Optional[int] = None
        self.remote_pid: Optional[int] = None
        self.remote_host = ""
        #: terminate() or kill() was asked by this process: its end is no failure.
        self.cancel_requested = False
        self.started_at = time.monotonic()  # when it was prepared (fiber top: its age)
        self.cond = threading.Condition()
        self.sentinel_r, self._sentinel_w = os.pipe()
        #: Its owner (a pool) watches the sentinel and closes it: the program's
        #: ``close()`` leaves it open (see `fiber.process._process.keep_sentinel`).
        self.sentinel_kept = False

    @property
    def finished(self) -> bool:
        return self.status is not None

    def exitcode(self) -> Optional[int]:
        st = self.status
        if st is None:
            return None
        if st.exitcode is not None:
            return st.exitcode
        if self.reported is not None:
            return self.reported
        return -signal.SIGKILL if st.state in (JobState.CANCELLED, JobState.LOST) else 1

    def finish(self, status: JobStatus) -> None:
        with self.cond:
            if self.status is not None:
                return
            self.status = status
            try:
                os.close(self._sentinel_w)
            finally:  # (whatever happens, a join waiting for it is woken)
                self.cond.notify_all()
        _launcher.launcher().remove(self.token)
        for release in self.handoffs:  # objects the job was handed but may never have taken
            try:
                release()
            except Exception:
                pass

    def abandon(self) -> None:
        """The job was never submitted: release what was prepared for it."""
        self.close_sentinel()
        self.finish(JobStatus(JobState.FAILED, None, "not submitted"))

    def withdraw(self, handle: JobHandle, why: BaseException) -> None:
        """The job was submitted but its start failed in this process after the submit
        (``why``): it is ended at once and counts as ended, so that nothing (the exit
        handler's ``join``) waits for a job that the caller was told did not start."""
        self.handle = handle
        self.cancel_requested = True
        try:
            self.backend.cancel([handle], force=True)
        except Exception as e:  # the start's own error is the one the caller gets
            sys.stderr.write(f"fiber: cannot cancel job {handle.job_id}, whose start "
                             f"failed ({why!r}): {e}\n")
        self.close_sentinel()
        self.finish(JobStatus(JobState.CANCELLED, None, f"its start failed: {why!r}"))

    def cancel_if_not_started(self, name: str) -> None:
        """Cancel the job of process ``name`` if it has not connected back yet, which
        ``startup_timeout`` after its submit means the cluster never ran it (stuck
        pending, lost at launch): it then counts as ended, never waited for for ever."""
        if self.remote_pid is not None or self.finished or self.handle is None:
            return
        log("%s did not connect within startup_timeout; cancelling it", name)
        sys.stderr.write(f"fiber: {name} did not start within "
                         f"{get_config().startup_timeout} s; cancelling its job\n")
        canceller = threading.Thread(target=self.backend.cancel, args=([self.handle], True),
                                     name="fiber-cancel", daemon=True)
        try:
            canceller.start()
        except RuntimeError:  # interpreter exit (3.12+ starts no thread): cancel here
            self.backend.cancel([self.handle], True)

    def close_sentinel(self) -> None:
        """Close the sentinel's read end, once (``close()``, or the process collected)."""
        fd, self.sentinel_r = self.sentinel_r, -1
        if fd >= 0:
            os.close(fd)

    def wait(self, timeout: Optional[float]) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.status is not None, timeout)
