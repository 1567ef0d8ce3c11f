"""A base for batch backends that submit job arrays and keep a record of each job (Slurm,
Grid Engine): what they share, with the few hooks in which they differ.

`ArrayBackend` groups the specs of one ``submit`` into arrays of identical jobs (one
submit command each, which the `submission` hook writes), keeps an `ArrayJob` per job
it submitted, which each poll updates from the engine's listing (`list_jobs`) or, for a
job gone from it, from its accounting (`accounting`); it cancels by id (`cancel_ids`, the
engine's ``scancel`` or ``qdel``), follows a job's output file, and at exit removes what
the program left queued (`remove_program_jobs`, from the engine's `find_jobs`).
"""

from __future__ import annotations

import abc
import dataclasses
import os
import re
import shlex
import signal
import sys
import threading
import time
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    FrozenSet,
    Generic,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
)

from ..config import get_config, settings
from ..errors import ConfigError, FiberError, SubmitError
from ._base import JobHandle, JobInfo, JobSpec, JobState, JobStatus, JobWatcher
from ._batch import BatchBackend, cancel_listed, follow_job, parse_job_id, render_script, split_env
from ._batch_status import cancelled_status
from ._common import route_toward

__all__ = ["ArrayBackend", "ArrayJob", "Submission", "BatchSettings", "safe_name", "array_name",
           "index_spans"]


def safe_name(text: str) -> str:
    """``text`` as a job name may hold it (letters, digits, ``._-``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)[:64] or "job"


def array_name(names: Sequence[str]) -> str:
    """The name of an array of jobs named ``names``: what they share, without a trailing
    number (``PoolWorker-1``, ``PoolWorker-2``: ``PoolWorker``)."""
    common = os.path.commonprefix(list(names)).rstrip("-_:.0123456789")
    return common or "array"


def index_spans(indexes: Sequence[int]) -> List[Tuple[int, int]]:
    """The runs of consecutive numbers in sorted ``indexes``, first and last
    (``[1, 2, 3, 7]``: ``[(1, 3), (7, 7)]``): an array's tasks as a cancel command takes
    them, one range rather than one id a task."""
    spans: List[Tuple[int, int]] = []
    for i in indexes:
        if spans and i == spans[-1][1] + 1:
            spans[-1] = (spans[-1][0], i)
        else:
            spans.append((i, i))
    return spans


class Submission(NamedTuple):
    """A submit command, as a backend's `ArrayBackend.submission` writes it."""

    argv: List[str]
    #: Where it goes, for messages: ``(setting, value)`` pairs (``("partition", "gpu")``),
    #: those with an empty value (the default) left out.
    where: Sequence[Tuple[str, str]]
    output: Callable[[str], str]  # the output file of a job alone, given its job id


class BatchSettings(Protocol):
    """The settings every array backend has (each its dataclass, with its own words)."""

    @property
    def time_limit(self) -> str:
        """Each job's time limit in the engine's format; empty: the queue's."""

    @property
    def extra_args(self) -> str:
        """More submit arguments, split like a shell command line."""


@dataclasses.dataclass
class ArrayJob:
    """A job this process submitted, as the backend knows it."""

    handle: JobHandle
    submitted: float  # time.monotonic() of its submission
    seen: bool = False  # listed by the cluster at least once
    cancelled: Optional[str] = None  # "term" | "kill" once fiber cancelled it
    deleted: bool = False  # the listing showed it cancelled, not by fiber
    last_seen: float = 0.0  # time.monotonic() of the last poll that listed it
    final: Optional[JobStatus] = None  # its end, once known
    output: str = ""  # its output file (a job alone in its submission; arrays: "")


R = TypeVar("R", bound=ArrayJob)
W = TypeVar("W")  # a job as the engine's listing shows it (a squeue row, a qstat row)
A = TypeVar("A")  # a job's accounting record (sacct's, qacct's)


class ArrayBackend(BatchBackend, Generic[R, W, A]):
    """A batch backend of job arrays, whose record of a job is an ``R`` (`ArrayJob` or a
    subclass), a listed job a ``W`` and an accounting record an ``A``. A scheduler says
    what its commands are and how to read them (the hooks below: `submission`,
    `list_jobs`, `listed_status`, `accounted_status`, `cancel_ids`, `find_jobs`...) and
    the words of its messages (`cluster`, `lister`...); this base runs them, and reads the
    settings all of them have (`own`: the time limit, more submit arguments)."""

    #: The cluster manager's name in messages ("Slurm", "Grid Engine").
    cluster: ClassVar[str] = ""
    #: What it calls the daemon whose host `listen_host` routes to ("controller").
    controller: ClassVar[str] = ""
    #: What it calls an array of jobs, in messages ("a job array", "an array job").
    array_word: ClassVar[str] = "a job array"
    #: The job script's variable of a task's index in its array, the first index, and
    #: what joins the index to the array's job id in a task's id (``123_0``, ``123.1``).
    index_var: ClassVar[str] = ""
    first_index: ClassVar[int] = 0
    task_separator: ClassVar[str] = "_"
    #: Lines of the job script that run before its command.
    script_setup: ClassVar[Tuple[str, ...]] = ()
    #: The command whose listing `list_jobs` reads, in messages ("squeue", "qstat").
    lister: ClassVar[str] = ""
    #: Seconds a job may go unlisted after its submit before it counts as LOST.
    unseen_grace: ClassVar[float] = 60.0
    #: `find_jobs`' states of a job with nothing left to stop, and of one still queued.
    stopped_states: ClassVar[FrozenSet[str]] = frozenset()
    queued_states: ClassVar[FrozenSet[str]] = frozenset({"pending"})
    #: What it means when a job's output file does not appear (`follow`).
    unshared_output: ClassVar[str] = ""
    #: What a job cancelled by someone else is said to be, and its exit code (the signal
    #: the engine's cancel command sends).
    others_cancel: ClassVar[Tuple[str, int]] = ("cancelled", -signal.SIGTERM)
    #: Seconds a job gone from the listing may go without an accounting record (which the
    #: engine may write late) before it is LOST, and why it is LOST then.
    acct_grace: ClassVar[float] = 0.0
    unaccounted: ClassVar[str] = ""
    #: The formats of a time limit, for the error of a setting in none of them.
    time_format: ClassVar[str] = ""
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
    def job_name_prefix(self) -> str:
        """What the name of each job starts with (``<name>_job_name_prefix``)."""

    @abc.abstractmethod
    def submission(self, specs: Sequence[JobSpec], name: str, label: str) -> Submission:
        """The submit command of identical ``specs``, in one array if more than one, named
        ``name`` (``label``: their name for people, which `find_jobs` gives back).

        Raises:
            SubmitError, ConfigError: the settings or specs say what it cannot ask for.
        """

    def array_size(self, n: int) -> int:
        """The most jobs of ``n`` identical ones that one array may hold."""
        return n

    @abc.abstractmethod
    def new_record(self, handle: JobHandle, submitted: float, output: str = "") -> R:
        """A job's record: ``R(handle, submitted, output=output)`` (also of a job this
        process did not submit, which a query is asked about)."""

    @abc.abstractmethod
    def list_jobs(self, handles: Sequence[JobHandle]) -> Dict[str, W]:
        """The engine's listing of ``handles`` (it may hold other jobs too), by job id,
        from as few and as cheap commands as it serves.

        Raises:
            SubmitError: the listing failed.
        """

    @abc.abstractmethod
    def listed_status(self, rec: R, row: W, now: float) -> Tuple[JobStatus, str]:
        """A listed job's status and its host ("" not known yet), from its ``row``; with
        the records' lock held (``now``: the poll's ``time.monotonic()``)."""

    def listed_ended(self, recs: List[R]) -> Dict[str, JobStatus]:
        """For jobs listed as ended (their ``final`` set): the statuses to report instead,
        after what the engine needs done of them (Grid Engine deletes jobs it would go on
        listing); by default nothing."""
        return {}

    def accounting(self, recs: List[R]) -> Dict[str, A]:
        """The accounting records of jobs the listing did not show, by job id (those the
        engine has); by default none."""
        return {}

    @abc.abstractmethod
    def accounted_status(self, rec: R, acct: A) -> JobStatus:
        """The status of a job the listing did not show, from its accounting record; with
        the records' lock held."""

    @abc.abstractmethod
    def cancel_ids(self, ids: Sequence[str], force: bool = False) -> None:
        """Cancel jobs by id, whoever submitted them (``fiber stop``).

        Raises:
            SubmitError: the cancel command failed for one of them.
        """

    @abc.abstractmethod
    def limit_seconds(self, text: str) -> Optional[float]:
        """The time limit setting's ``text`` in seconds, None if in no `time_format`."""

    @abc.abstractmethod
    def locate_controller(self) -> Tuple[str, str]:
        """The host of the engine's `controller`, and where that was found (for messages).

        Raises:
            BackendError: it cannot be told.
        """

    def listen_host(self) -> str:
        """(See `Backend.listen_host`.) ``listen_host`` if set, else this host's address
        on its route to the `controller`, which the nodes reach too."""
        cfg = get_config()
        if cfg.listen_host:
            return cfg.listen_host
        host, source = self.locate_controller()
        return route_toward(host, f"the {self.cluster} {self.controller} {host!r}",
                            f"check {source}", "the nodes")

    # -- settings --------------------------------------------------------------------------

    def own(self) -> BatchSettings:
        """This backend's settings in the config in force."""
        return settings(self.settings, self.name)  # type: ignore[arg-type]

    def job_time_limit(self) -> Optional[float]:
        """``<name>_time_limit`` in seconds (None if unset): a pool renews its workers
        before it (see fiber.pool._renew), and each job is asked to be warned ahead of it.

        Raises:
            ConfigError: it is in none of the engine's formats (`time_format`).
        """
        text = self.own().time_limit.strip()
        if not text:
            return None
        seconds = self.limit_seconds(text)
        if seconds is None:
            raise ConfigError(f"{self.name}_time_limit", f"{text!r} is not {self.time_format}")
        return seconds

    def extra_args(self) -> List[str]:
        """``<name>_extra_args`` split like a shell command line.

        Raises:
            ConfigError: it cannot be split so.
        """
        text = self.own().extra_args
        try:
            return shlex.split(text)
        except ValueError as e:
            raise ConfigError(f"{self.name}_extra_args", f"cannot split {text!r}: {e}"
                              ) from None

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

    def submit_array(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Submit identical ``specs`` (one command, resources and hosts to avoid) with one
        submit command (`submission`), a job array if more than one, its job script on
        stdin; record each job (`record`).

        Raises:
            SubmitError: the scheduler refused or did not answer.
        """
        n = len(specs)
        label = specs[0].name if n == 1 else array_name([s.name for s in specs])
        name = f"{self.job_name_prefix()}-{safe_name(label)}"
        argv, pairs, output = self.submission(specs, name, label)
        where = ", ".join(f"{k} {v!r}" for k, v in pairs if v)
        common, own = split_env([{**s.env, self.program_env: self.program} for s in specs])
        try:
            script = render_script(specs[0].command, common, own, index_var=self.index_var,
                                   first_index=self.first_index, setup=self.script_setup)
        except ValueError as e:
            raise SubmitError(f"cannot write the job script: {e}") from None
        what = (f"{argv[0]} (submitting {n} fiber job{f's as {self.array_word}' if n > 1 else ''}"
                + (f"; {where}" if where else "") + ")")
        cp = self.run_command(argv, input=script, timeout=self.submit_timeout, what=what)
        try:
            job = parse_job_id(cp.stdout, r"^\s*(\d+)")
        except ValueError:
            raise SubmitError(f"{what}: no job id in its output", command=argv,
                              returncode=cp.returncode, stdout=cp.stdout,
                              stderr=cp.stderr) from None
        ids = [f"{job}{self.task_separator}{self.first_index + i}" for i in range(n)
               ] if n > 1 else [job]
        handles = [JobHandle(i, self.name) for i in ids]
        self.record(handles, output=output(job) if n == 1 else "")
        return handles

    def record(self, handles: Sequence[JobHandle], output: str = "") -> None:
        """Keep a record of jobs just submitted (their output file for a single job) and
        have them cancelled at exit unless seen finished."""
        now = time.monotonic()
        with self._lock:
            for h in handles:
                self._jobs[h.job_id] = self.new_record(h, now, output)
        self.remember(handles)

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

    # -- status ----------------------------------------------------------------------------

    def query(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        """Each job's status: the ends known already (`settled`), then one listing
        (`list_jobs`) for the others; the jobs it does not show are `unlisted`."""
        out, ask = self.settled(handles)
        if not ask:
            return out
        rows = self.list_jobs(ask)
        missing: List[R] = []
        ended: List[R] = []
        now = time.monotonic()
        with self._lock:
            for h in ask:
                rec = self._jobs.get(h.job_id)
                if rec is None:  # a handle this process did not submit
                    rec = self._jobs[h.job_id] = self.new_record(h, now)
                row = rows.get(h.job_id)
                if row is None:
                    missing.append(rec)
                    continue
                rec.seen, rec.last_seen = True, now
                st, host = self.listed_status(rec, row, now)
                if host:
                    h.host = rec.handle.host = host
                if st.state.finished:
                    rec.final = st
                    ended.append(rec)
                out[h.job_id] = st
        if ended:
            out.update(self.listed_ended(ended))
        if missing:
            out.update(self.unlisted(missing))
        return out

    def unlisted(self, recs: List[R]) -> Dict[str, JobStatus]:
        """The status of jobs the listing no longer (or not yet) shows (`gone_status`,
        with the `accounting` records the engine has of them)."""
        found = self.accounting(recs)
        out: Dict[str, JobStatus] = {}
        now = time.monotonic()
        with self._lock:
            for rec in recs:
                st = self.gone_status(rec, found.get(rec.handle.job_id), now)
                if st.state.finished:
                    rec.final = st
                out[rec.handle.job_id] = st
        return out

    def gone_status(self, rec: R, acct: Optional[A], now: float) -> JobStatus:
        """The status of a job the listing did not show: from its accounting record
        ``acct``; else a cancellation if one was asked; else, for a job listed before, RUNNING
        for `acct_grace` seconds (its record may come late), LOST then; `unseen_status` if
        never listed. With the records' lock held."""
        if acct is not None:
            return self.accounted_status(rec, acct)
        if rec.cancelled or rec.deleted:  # (a pending one at once, not a minute later)
            return cancelled_status(rec.cancelled, *self.others_cancel)
        if rec.seen and now - rec.last_seen < self.acct_grace:
            return JobStatus(JobState.RUNNING, None, "ended; its accounting record is not "
                             "written yet")
        if rec.seen:
            return JobStatus(JobState.LOST, None, self.unaccounted)
        return self.unseen_status(rec, now)

    def unseen_status(self, rec: R, now: float) -> JobStatus:
        """A job never listed: PENDING for `unseen_grace` seconds after its submit (a
        listing may lag behind it), LOST then."""
        if now - rec.submitted > self.unseen_grace:
            return JobStatus(JobState.LOST, None, f"{self.cluster} does not know this job")
        return JobStatus(JobState.PENDING, None, f"not listed by {self.lister} yet")

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

    def run_cancel(self, head: Sequence[str], targets: Sequence[str],
                   harmless: Sequence[str], *, stdout_too: bool = False
                   ) -> Optional[SubmitError]:
        """Run the cancel command ``head`` on ``targets``, 500 a call; the error of the
        first call whose stderr (and with ``stdout_too`` stdout) says more than the
        ``harmless`` messages (of a job already ended or unknown), else None. Returned,
        not raised: a caller may try another way.

        Raises:
            SubmitError: the command could not run or did not answer in time.
        """
        for k in range(0, len(targets), 500):
            argv = [*head, *targets[k:k + 500]]
            cp = self.run_command(argv, timeout=self.cancel_timeout, what=head[0],
                                  check=False)
            if cp.returncode == 0:
                continue
            said = cp.stdout + "\n" + cp.stderr if stdout_too else cp.stderr
            if any(ln.strip() and not any(h in ln for h in harmless)
                   for ln in said.splitlines()):
                return SubmitError(f"{head[0]} failed", command=argv,
                                   returncode=cp.returncode, stdout=cp.stdout,
                                   stderr=cp.stderr)
        return None

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

    def remove_program_jobs(self, program: str, job_ids: Sequence[str] = (), *,
                            force: bool = False, queued_only: bool = False,
                            until_ended: bool = False) -> List[str]:
        """Cancel the jobs of ``program`` that `find_jobs` lists unstopped (listing again
        until none is left, for at most `cancel_timeout`; with ``until_ended``, until
        every one has ended: see `cancel_listed`), or those of ``job_ids``, or with
        ``queued_only`` the program's jobs that have not started; the ids cancelled
        (``force``: with SIGKILL, where the engine can choose)."""
        def stoppable(j: JobInfo) -> bool:
            return (j.state not in self.stopped_states and bool(program or j.job_id in job_ids)
                    and (not queued_only or j.state in self.queued_states))
        again = bool(program) and not queued_only  # a program's pool may submit meanwhile
        return cancel_listed(lambda: self.find_jobs(program), stoppable,
                             lambda ids: self.cancel_ids(ids, force),
                             timeout=self.cancel_timeout if again else 0.0,
                             until_ended=until_ended)

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
