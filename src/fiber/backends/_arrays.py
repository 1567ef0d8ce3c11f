"""A base for batch backends that submit job arrays and keep a record of each job (Slurm,
Grid Engine): what they share, with the few hooks in which they differ.

`ArrayBackend` groups the specs of one ``submit`` into arrays of identical jobs (one
submit command each, `submit_array`), keeps an `ArrayJob` per job it submitted (the
watcher's polls update it), cancels by id (`cancel_ids`, the engine's ``scancel`` or
``qdel``), follows a job's output file, and at exit removes what the program left queued
(`remove_program_jobs`).
"""

from __future__ import annotations

import abc
import dataclasses
import sys
import threading
import time
from typing import Any, ClassVar, Dict, Generic, Iterator, List, Optional, Sequence, Tuple, TypeVar

from ..errors import FiberError, SubmitError
from ._base import JobHandle, JobSpec, JobStatus, JobWatcher
from ._batch import BatchBackend, follow_job

__all__ = ["ArrayBackend", "ArrayJob"]


@dataclasses.dataclass
class ArrayJob:
    """A job this process submitted, as the backend knows it."""

    handle: JobHandle
    submitted: float  # time.monotonic() of its submission
    seen: bool = False  # listed by the cluster at least once
    cancelled: Optional[str] = None  # "term" | "kill" once fiber cancelled it
    final: Optional[JobStatus] = None  # its end, once known
    output: str = ""  # its output file (a job alone in its submission; arrays: "")


R = TypeVar("R", bound=ArrayJob)


class ArrayBackend(BatchBackend, Generic[R]):
    """A batch backend of job arrays, whose record of a job is an ``R`` (`ArrayJob` or a
    subclass); subclasses implement `submit_array`, `new_record`, `cancel_ids`,
    `remove_program_jobs`, `query` and `listen_host`, and say `cluster` and
    `unshared_output`."""

    #: The cluster manager's name in messages ("Slurm", "Grid Engine").
    cluster: ClassVar[str] = ""
    #: What it means when a job's output file does not appear (`follow`).
    unshared_output: ClassVar[str] = ""
    #: Shortest and longest interval between two status polls (each a command that asks
    #: the scheduler); normal exits do not wait for a poll (the child reports its exit).
    poll_min_interval = 0.25
    poll_max_interval = 2.0

    def __init__(self) -> None:
        """No job yet: records come with `submit`, the watcher with the first wait."""
        super().__init__()
        self._lock = threading.Lock()
        self._jobs: Dict[str, R] = {}
        self._submitted = False  # whether this process submitted batch jobs

    def watcher(self) -> JobWatcher:
        """(See `Backend.watcher`; kept where `Backend.close` finds it.)"""
        with self._lock:
            w = self.__dict__.get("_watcher")
            if w is None:
                w = self.__dict__["_watcher"] = JobWatcher(
                    self, self.poll_min_interval, self.poll_max_interval)
            return w

    # -- hooks -----------------------------------------------------------------------------

    @abc.abstractmethod
    def submit_array(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Submit identical ``specs`` (one command, resources and hosts to avoid) with one
        submit command, a job array if more than one; record each (`record`).

        Raises:
            SubmitError: the scheduler refused or did not answer.
        """

    def array_size(self, n: int) -> int:
        """The most jobs of ``n`` identical ones that one array may hold."""
        return n

    @abc.abstractmethod
    def cancel_ids(self, ids: Sequence[str], force: bool = False) -> None:
        """Cancel jobs by id, whoever submitted them (``fiber stop``).

        Raises:
            SubmitError: the cancel command failed for one of them.
        """

    @abc.abstractmethod
    def remove_program_jobs(self, program: str, job_ids: Sequence[str] = (), *,
                            force: bool = False, queued_only: bool = False,
                            until_ended: bool = False) -> List[str]:
        """Cancel the unfinished jobs of ``program`` (or of ``job_ids``); the ids cancelled
        (see `fiber.backends._batch.cancel_listed`)."""

    # -- submit ----------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """One array a group of identical specs (in chunks of `array_size`). If one
        submit fails, the jobs already submitted are cancelled and the error raised: the
        caller abandons them all, so none may run."""
        if not specs:
            return []
        groups: Dict[Tuple[Any, ...], List[int]] = {}
        for i, spec in enumerate(specs):
            groups.setdefault((tuple(spec.command), spec.resources, spec.avoid_hosts),
                              []).append(i)
        handles: List[Optional[JobHandle]] = [None] * len(specs)
        try:
            for indexes in groups.values():
                size = self.array_size(len(indexes))
                for k in range(0, len(indexes), size):
                    chunk = indexes[k:k + size]
                    self._submitted = True
                    for i, h in zip(chunk, self.submit_array([specs[i] for i in chunk])):
                        handles[i] = h
        except BaseException:
            done = [h for h in handles if h is not None]
            if done:
                try:
                    self.cancel(done, force=True)
                except Exception:
                    pass
            raise
        return [h for h in handles if h is not None]

    def record(self, handles: Sequence[JobHandle], output: str = "") -> None:
        """Keep a record of jobs just submitted (their output file for a single job) and
        have them cancelled at exit unless seen finished."""
        now = time.monotonic()
        with self._lock:
            for h in handles:
                self._jobs[h.job_id] = self.new_record(h, now, output)
        self.remember(handles)

    @abc.abstractmethod
    def new_record(self, handle: JobHandle, submitted: float, output: str = "") -> R:
        """A job's record: ``R(handle, submitted, output=output)`` (also of a job this
        process did not submit, which a query is asked about)."""

    def settled(self, handles: Sequence[JobHandle]
                ) -> Tuple[Dict[str, JobStatus], List[JobHandle]]:
        """For `query`: the status of the jobs whose end is known already, and the jobs
        to ask the cluster about."""
        out: Dict[str, JobStatus] = {}
        ask = []
        with self._lock:
            for h in handles:
                rec = self._jobs.get(h.job_id)
                if rec is not None and rec.final is not None:
                    out[h.job_id] = rec.final
                else:
                    ask.append(h)
        return out, ask

    # -- cancel, release -------------------------------------------------------------------

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        """Cancel the jobs not seen ended, each marked as cancelled by fiber (its end is
        then a cancellation, not a loss); a failed cancel unmarks them."""
        how = "kill" if force else "term"
        ids = []
        with self._lock:
            for h in handles:
                rec = self._jobs.get(h.job_id)
                if rec is not None:
                    if rec.final is not None:
                        continue
                    if rec.cancelled != "kill":
                        rec.cancelled = how
                ids.append(h.job_id)
        if not ids:
            return
        try:
            self.cancel_ids(ids, force)
        except SubmitError:  # not cancelled: not to be taken for so
            with self._lock:
                for job_id in ids:
                    rec = self._jobs.get(job_id)
                    if rec is not None and rec.cancelled == how:
                        rec.cancelled = None
            raise

    def release(self, handle: JobHandle) -> None:
        """(See `Backend.release`.) Forget an ended job's record."""
        with self._lock:
            rec = self._jobs.get(handle.job_id)
            if rec is not None and rec.final is not None:
                del self._jobs[handle.job_id]

    # -- fiber run, ps, logs, stop ---------------------------------------------------------

    def follow(self, handle: JobHandle) -> Optional[Iterator[str]]:
        """A job's output file as it grows, until it has ended (None for an array's task,
        whose output file `record` was not given)."""
        with self._lock:
            rec = self._jobs.get(handle.job_id)
        if rec is None:
            return None
        since = time.time() - (time.monotonic() - rec.submitted)  # submitted, wall clock
        return follow_job(self, handle, rec.output, since, self.unshared_output)

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        """(See `CommandLineBackend.remove_jobs`.) A program's jobs are removed once
        they have ended."""
        return self.remove_program_jobs(program, job_ids, until_ended=True)

    def stop_main(self, handle: JobHandle, force: bool = False) -> None:
        """The program's job, and its processes' jobs still queued (they have this
        process's program id): they would otherwise start once a CPU is freed, only to
        find their master gone. Running ones are left to the program's own cleanup. The
        queued ones first: the program's end frees its CPUs, and a queued job could start
        on them between the two."""
        self.remove_program_jobs(self.program, force=force, queued_only=True)
        self.cancel([handle], force=force)

    def cancel_unfinished(self) -> None:
        """At exit: what `BatchBackend.cancel_unfinished` cancels, and for a program's
        root process every job of the program still listed (its processes' children)."""
        super().cancel_unfinished()
        if self.detached or self.inherited or not self._submitted:
            return
        try:
            self.remove_program_jobs(self.program)
        except FiberError as e:  # at exit: say so, never raise
            sys.stderr.write(f"fiber: could not cancel the {self.cluster} jobs of program "
                             f"{self.program} at exit ({str(e).splitlines()[0]})\n")
