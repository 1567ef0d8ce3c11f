"""Bookkeeping shared by backends whose jobs are labelled objects of a cluster manager
(Docker containers, Kubernetes pods).

Every job carries the program's id as a label, so that one query lists all of a program's
jobs and one cleanup at exit removes them; fiber processes in those jobs inherit the id
(through ``program_env``), so the master's query and cleanup also see their children's jobs.
A job that ended keeps its final status and the tail of its output after the cluster's
object is removed.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import itertools
import os
import secrets
import signal
import threading
import time
from typing import Dict, Generic, List, Optional, Sequence, Set, Tuple, TypeVar

from .._process_state import here
from ._base import JobHandle, JobState, JobStatus
from ._cli_backend import CommandLineBackend

__all__ = ["TrackedJob", "LabelledBackend"]

_KEEP_LOGS = 256  # ended jobs whose output is kept (the most recent)
_REMOVE_ROUNDS = 5  # listings by fiber stop (a program may start a job meanwhile)


@dataclasses.dataclass
class TrackedJob:
    """What a backend remembers of one job."""

    job_id: str
    name: str
    memory_mb: Optional[int] = None
    #: Signals fiber sent it (a job fiber ended is CANCELLED, not FAILED).
    signalled: List[int] = dataclasses.field(default_factory=list)
    final: Optional[JobStatus] = None
    #: Held while its end is read: concurrent status() calls finish a job once.
    finishing: threading.Lock = dataclasses.field(default_factory=threading.Lock)


J = TypeVar("J", bound=TrackedJob)
L = TypeVar("L")


class LabelledBackend(CommandLineBackend, Generic[J, L]):
    """A backend whose jobs (of type ``J``) are labelled with the program's id; ``L`` is
    the type of a job's kept output."""

    def __init__(self, program_env: str) -> None:
        """``program_env``: the environment variable that hands the program's id to its
        jobs (a child's jobs carry its parent's label)."""
        inherited = os.environ.get(program_env, "")
        #: Whether the id came from the parent: a child or a ``fiber run`` main program.
        self.inherited = bool(inherited)
        #: The program's id: the value of every job's ``fiber.program`` label.
        self.program = inherited or secrets.token_hex(6)
        self._prefix = f"fiber-{self.program}-" + (f"{secrets.token_hex(3)}-" if inherited
                                                   else "")
        self._pid = here.pid
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._jobs: Dict[str, J] = {}
        self._logs: collections.OrderedDict[str, L] = collections.OrderedDict()
        self._atexit = False
        self._detached = False

    def _new_job_id(self) -> str:
        """``fiber-<program>-<n>``: a valid container name, pod name and label value."""
        return f"{self._prefix}{next(self._ids)}"

    def _add(self, jobs: Sequence[J]) -> None:
        """Called by `submit` with the jobs it created: they are this process's."""
        with self._lock:
            for job in jobs:
                self._jobs[job.job_id] = job

    def _split(self, handles: Sequence[JobHandle]) -> Tuple[Dict[str, JobStatus], List[J]]:
        """The statuses known without asking the cluster (ended or unknown jobs), and the
        jobs whose status must be queried."""
        out: Dict[str, JobStatus] = {}
        live: List[J] = []
        with self._lock:
            for h in handles:
                job = self._jobs.get(h.job_id)
                if job is None:
                    out[h.job_id] = JobStatus(JobState.LOST, None, "unknown job")
                elif job.final is not None:
                    out[h.job_id] = job.final
                else:
                    live.append(job)
        return out, live

    def _mark_signalled(self, handles: Sequence[JobHandle],
                        force: bool) -> Tuple[signal.Signals, List[J]]:
        """Record that the still-running ``handles`` are being ended; they are returned."""
        sig = signal.SIGKILL if force else signal.SIGTERM
        targets = []
        with self._lock:
            for h in handles:
                job = self._jobs.get(h.job_id)
                if job is not None and job.final is None:
                    job.signalled.append(int(sig))
                    targets.append(job)
        return sig, targets

    def _keep_log(self, job_id: str, output: L) -> None:
        """Keep an ended job's output (the last few hundred jobs': `read_logs` finds it
        once the cluster removed the job)."""
        with self._lock:
            self._logs[job_id] = output
            while len(self._logs) > _KEEP_LOGS:
                self._logs.popitem(last=False)

    def _known(self, job_id: str) -> Tuple[Optional[J], Optional[L]]:
        """The job and its kept output (None while it was not kept)."""
        with self._lock:
            return self._jobs.get(job_id), self._logs.get(job_id)

    def _kept_log(self, job_id: str, default: Optional[L]) -> Optional[L]:
        """The output kept of ``job_id`` (`_keep_log`), else ``default``."""
        with self._lock:
            return self._logs.get(job_id, default)

    def _register_atexit(self) -> None:
        """Called at the first submit: at the program's exit its jobs still running are
        removed (`_exit_cleanup`), once."""
        with self._lock:
            if self._atexit:
                return
            self._atexit = True
        atexit.register(self._exit_cleanup)

    def detach(self) -> None:
        """(See `Backend.detach`.) The program's exit leaves its jobs running."""
        with self._lock:
            self._detached = True

    def _exit_cleanup(self) -> None:
        """At the program's exit (not a fork's, nor a detached program's): its jobs
        still running are removed, and counted as cancelled."""
        if here.pid != self._pid or self._detached:  # a fork of the master: not its jobs
            return
        with self._lock:
            for job in self._jobs.values():
                if job.final is None:
                    job.final = JobStatus(JobState.CANCELLED, -signal.SIGKILL,
                                          "removed at the master's exit")
        self.remove_all()

    def remove_all(self) -> None:
        """Remove this program's jobs from the cluster (running ones are killed); at the
        master's exit. A program whose id is inherited (a main program started by ``fiber
        run``) removes only the jobs it started itself."""
        with self._lock:
            mine = set(self._jobs)
        if self.inherited:
            self._remove_listed("", mine, at_exit=True)
        else:
            self._remove_listed(self.program, set(), at_exit=True)

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        """(See `CommandLineBackend.remove_jobs`.)"""
        # A program being removed may still start a job (a pool replacing a worker that
        # was just removed): list again until nothing new is left.
        removed: List[str] = []
        for _ in range(_REMOVE_ROUNDS):
            done = [j for j in self._remove_listed(program, set(job_ids)) if j not in removed]
            if not done:  # (a deleted pod may be listed while it terminates)
                break
            removed.extend(done)
            time.sleep(0.5)
        return removed

    def _remove_listed(self, program: str, wanted: Set[str],
                       at_exit: bool = False) -> List[str]:
        """Remove the jobs the cluster lists now of ``program`` (or, without one, those
        named in ``wanted``); their ids. ``at_exit``: with an exiting master's timeouts."""
        raise NotImplementedError

    def release(self, handle: JobHandle) -> None:
        """(See `Backend.release`.) Forget an ended job and its kept output."""
        with self._lock:
            job = self._jobs.get(handle.job_id)
            if job is not None and job.final is not None:
                del self._jobs[handle.job_id]
                self._logs.pop(handle.job_id, None)
