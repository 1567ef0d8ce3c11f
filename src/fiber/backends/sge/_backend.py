"""The ``sge`` backend: every fiber process is a Grid Engine job (Son of Grid Engine, Open
Grid Scheduler, Univa/Altair Grid Engine: the ``qsub`` family).

Grid Engine is driven through its own commands (``qsub``, ``qstat``, ``qacct``, ``qdel``),
each with a timeout: a command that fails or hangs raises `SubmitError` with the command,
its exit code, stdout and stderr. Nothing is installed on the cluster; the nodes need the
same Python environment as the master (a shared filesystem).

Submit: one ``qsub`` per group of identical jobs. Many identical jobs submitted together
(a pool's workers) go out as **one array job** (``qsub -t 1-N``). The job script is handed
to ``qsub`` on stdin: it exports the environment the jobs share once and each task's own
job token in a ``case`` over ``$SGE_TASK_ID``, then ``exec``-s ``python -m
fiber.process._bootstrap`` (``-S /bin/sh``; ``-C ''``: no line of it is read as a qsub
directive). The program's secret is therefore never on a command line, nor in a file
fiber writes, nor in the job's environment list that ``qstat -j`` shows. Jobs are not
rerunnable (``-r n``): a job whose node fails is never started twice. Resources:
``-pe <sge_pe> N`` for N > 1 CPUs, ``-l <sge_memory_resource>=<MB per slot>M``, ``-l
<sge_gpu_resource>=N``; ``sge_queue`` (``-q``), ``sge_project`` (``-P``), ``sge_time_limit``
(``-l h_rt=``, with ``-notify``: SIGUSR2 at the limit, SIGKILL the queue's ``notify`` time
later; a pool renews its workers before the limit), ``sge_extra_args``.

Status: one ``qstat -f -ne -u <user> -xml`` per poll for all jobs: the running ones inside
their queue instance, with its state, and the pending ones. Grid Engine states map to
`JobState` as: ``qw``/``hqw`` → PENDING; ``r``/``t``/``s``/``dr`` → RUNNING; ``Eqw``
(the job could not start: a missing output directory...) → FAILED, and the job is
deleted. A crashed node's jobs stay ``r``; its queue instance turns ``u`` (unknown) once
the qmaster has not heard of its host for ``max_unheard``: such a job is LOST, and
deleted (``qdel -f`` where the user may, else ``qdel``). A job gone from qstat has ended:
its exit code comes from ``qacct -j`` (one call per job or array job; ``exit_status`` 128
+ n is signal n, as the script ``exec``-s Python), which lags the end by up to the
accounting flush time: until then (``_ACCT_GRACE`` at most) the job is still RUNNING,
then LOST. Normally the child's own exit report arrives first and settles it.

Cancel: ``qdel`` (one call for all, an array's tasks as ranges, ``12.1-128``); Grid Engine
kills the job's process group, so a cancelled job is -15 (``terminate``) or -9 (``kill``).
(A job with a time limit was submitted with ``-notify``: ``qdel`` sends it SIGUSR2 first; a
pool worker asks its master, which tells it to end at once.) Every job submitted and not
seen finished is deleted when the master exits normally or by an exception, and, for the
program's root process, every job of the program still listed (its processes' children); a
SIGKILLed master runs no hook, but its children's lifeline makes every started job exit (and
a job that starts later cannot fetch its payload and exits at once).

Where the master listens: ``listen_host`` if set, else the local address of the interface
that routes to the qmaster's host (``$SGE_ROOT/$SGE_CELL/common/act_qmaster``).
``JobHandle.pid`` is None (fiber uses synthetic pids); ``JobHandle.host`` is the job's node
once qstat shows it.

Output: Grid Engine jobs are not the master's children; each job's first process is its
output relay (``fiber.process._relay``), which writes to the job's log, ``qsub -o
<sge_output_dir>/<program> -j y``: ``<job name>.o<job id>[.<task id>]`` in a directory of
the program's own (job ids start again when a cluster's state is reset, and Grid Engine
appends to an output file that exists).
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ...config import Config, get_config, settings
from ...errors import BackendError, ConfigError, FiberError, SubmitError
from .._base import JobHandle, JobInfo, JobSpec, JobState, JobStatus, JobWatcher
from .._batch import BatchBackend, parse_job_id, render_script, split_env
from .._common import route_toward
from . import _jobs as _sge_jobs
from ._jobs import program_dir, user
from ._settings import SgeSettings, time_limit_seconds
from ._status import (
    Acct,
    Row,
    acct_status,
    array_name,
    cancelled_status,
    context_arg,
    error_reason,
    live_status,
    parse_qacct,
    parse_qstat,
    safe_name,
    smallest_host_cpus,
    split_id,
    task_expressions,
)

__all__ = ["SgeBackend", "PROGRAM_ENV", "resource_args", "qmaster_host"]

#: The program's id, inherited by its processes: every job's context names it.
PROGRAM_ENV = "FIBER_SGE_PROGRAM"

#: A job that qstat has never shown is LOST after this many seconds.
_UNSEEN_GRACE = 60.0
#: Seconds a job gone from qstat may go without an accounting record (the qmaster writes
#: them every ``accounting_flush_time``, 15 s by default) before it is LOST.
_ACCT_GRACE = 60.0
#: Grid Engine's default ``max_aj_tasks``: a larger group is submitted as several arrays.
_MAX_ARRAY = 75000
_BENIGN_QDEL = ("does not exist", "already been deleted", "has already been deleted",
                "is already in deletion", "registered", "has deleted", "forced the deletion")


def _own(cfg: Optional[Config] = None) -> SgeSettings:
    """The sge backend's settings in ``cfg`` (or the config in force)."""
    return settings(SgeSettings, "sge", cfg)


def resource_args(spec: JobSpec, own: SgeSettings) -> List[str]:
    """The ``qsub`` arguments of a spec's resources.

    Raises:
        SubmitError: the job asks for what the settings give no way to ask for (several
            CPUs without ``sge_pe``, GPUs without ``sge_gpu_resource``).
    """
    r = spec.resources
    slots = max(1, math.ceil(r.cpu or 1))
    args: List[str] = []
    if slots > 1:
        if not own.pe:
            raise SubmitError(f"{spec.name} asks for {r.cpu:g} CPUs: on Grid Engine a job "
                              "gets several slots from a parallel environment; set sge_pe "
                              "to one whose allocation rule is $pe_slots (qconf -spl lists "
                              "them)")
        args += ["-pe", own.pe, str(slots)]
    if r.memory_mb and own.memory_resource:
        args += ["-l", f"{own.memory_resource}={math.ceil(r.memory_mb / slots)}M"]
    if r.gpu:
        if not own.gpu_resource:
            raise SubmitError(f"{spec.name} asks for {r.gpu} GPUs, and sge_gpu_resource "
                              "is empty: set it to the cluster's GPU resource")
        args += ["-l", f"{own.gpu_resource}={int(r.gpu)}"]
    return args


def qmaster_host() -> str:
    """The qmaster's host, from ``$SGE_ROOT/$SGE_CELL/common/act_qmaster`` ("" unknown)."""
    return _act_qmaster()[0]


def _act_qmaster() -> Tuple[str, str]:
    """The qmaster's host and its file (``act_qmaster``), or "" and why it is unknown."""
    root = os.environ.get("SGE_ROOT", "")
    if not root:
        return "", ("SGE_ROOT is not set: Grid Engine's environment is not loaded (source "
                    "<sge_root>/<cell>/common/settings.sh)")
    path = os.path.join(root, os.environ.get("SGE_CELL") or "default", "common",
                        "act_qmaster")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            words = f.read().split()
    except OSError as e:
        return "", f"cannot read {path} ({e.strerror}): check SGE_ROOT and SGE_CELL"
    return (words[0], path) if words else ("", f"{path} is empty")


@dataclasses.dataclass
class _Job:
    handle: JobHandle
    submitted: float
    seen: bool = False
    last_seen: float = 0.0
    cancelled: Optional[str] = None  # "term" | "kill" once fiber deleted it
    deleted: bool = False  # qstat showed it being deleted, not by fiber
    final: Optional[JobStatus] = None
    output: str = ""  # its output file (a job alone in its qsub)
    acct_asked: float = 0.0  # when qacct was last asked of it (monotonic)
    acct_wait: float = 0.0  # seconds until it may be asked again (doubling: 1, 2, 4...)


class SgeBackend(BatchBackend):
    """Run fiber processes as Grid Engine jobs (``qsub``; array jobs for a batch)."""

    program_env = PROGRAM_ENV

    name = "sge"
    settings = SgeSettings

    #: Shortest interval between two status polls (each is a ``qstat`` RPC to the
    #: qmaster); normal exits do not wait for a poll (the child reports its exit itself).
    poll_min_interval = 0.25
    poll_max_interval = 2.0

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._jobs: Dict[str, _Job] = {}
        self._submitted = False

    def watcher(self) -> JobWatcher:
        with self._lock:
            w = self.__dict__.get("_watcher")
            if w is None:
                w = self.__dict__["_watcher"] = JobWatcher(
                    self, self.poll_min_interval, self.poll_max_interval)
            return w

    def listen_host(self) -> str:
        cfg = get_config()
        if cfg.listen_host:
            return cfg.listen_host
        host, source = _act_qmaster()
        if not host:
            raise BackendError(f"the sge backend cannot tell where the qmaster is: {source}")
        return route_toward(host, f"the Grid Engine qmaster {host!r}", f"check {source}",
                            "the nodes")

    # -- submit --------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        if not specs:
            return []
        groups: Dict[Tuple[Any, ...], List[int]] = {}
        for i, spec in enumerate(specs):
            groups.setdefault((tuple(spec.command), spec.resources, spec.avoid_hosts),
                              []).append(i)
        handles: List[Optional[JobHandle]] = [None] * len(specs)
        try:
            for indexes in groups.values():
                for k in range(0, len(indexes), _MAX_ARRAY):
                    chunk = indexes[k:k + _MAX_ARRAY]
                    for i, h in zip(chunk, self._qsub([specs[i] for i in chunk])):
                        handles[i] = h
        except BaseException:
            done = [h for h in handles if h is not None]
            if done:  # the caller abandons all of them: none may run
                try:
                    self.cancel(done, force=True)
                except Exception:
                    pass
            raise
        return [h for h in handles if h is not None]

    def query_node_cpus(self) -> Optional[int]:
        """The CPUs of the smallest execution host (``qhost``); None without ``sge_pe``
        (a job has one slot then)."""
        if not _own().pe:
            return None
        return smallest_host_cpus(self.run_command(["qhost"], what="qhost").stdout)

    def job_time_limit(self) -> Optional[float]:
        """``sge_time_limit`` in seconds (None if unset): a pool renews its workers before
        it (see fiber.pool._renew); jobs get SIGUSR2 at it (``-notify``), and a worker
        that gets it retires (fiber.pool._retire) in the queue's ``notify`` time."""
        text = _own().time_limit.strip()
        return time_limit_seconds(text) if text else None

    def qsub_args(self, specs: Sequence[JobSpec], own: SgeSettings, name: str,
                  label: str, out_dir: str) -> List[str]:
        """The ``qsub`` command line of ``specs`` (alike but for their environment)."""
        argv = ["qsub", "-terse", "-C", "", "-S", "/bin/sh", "-r", "n", "-N", name,
                "-o", out_dir, "-j", "y", "-ac", context_arg(self.program, label)]
        if own.export_env:
            argv.append("-V")
        for flag, value in (("-q", own.queue), ("-P", own.project)):
            if value:
                argv += [flag, value]
        argv += resource_args(specs[0], own)
        avoid = self.hosts_kept_off(specs[0].avoid_hosts, ["qconf", "-sel"])
        if avoid:  # a hostname expression: not any of them
            argv += ["-l", f"h=!{avoid[0]}" if len(avoid) == 1 else f"h=!({'|'.join(avoid)})"]
        if own.time_limit:  # -notify: SIGUSR2 first, which the job's relay passes on
            argv += ["-notify", "-l", f"h_rt={own.time_limit.strip()}"]
        if len(specs) > 1:
            argv += ["-t", f"1-{len(specs)}"]
        try:
            argv += shlex.split(own.extra_args)
        except ValueError as e:  # (refused when the config is resolved)
            raise ConfigError("sge_extra_args", str(e)) from None
        return argv

    def _qsub(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        own = _own()
        n = len(specs)
        label = specs[0].name if n == 1 else array_name([s.name for s in specs])
        name = f"{own.job_name_prefix}-{safe_name(label)}"
        out_dir = program_dir(self.program)
        argv = self.qsub_args(specs, own, name, label, out_dir)
        common, task_env = split_env([{**s.env, PROGRAM_ENV: self.program} for s in specs])
        try:
            script = render_script(specs[0].command, common, task_env,
                                   index_var="SGE_TASK_ID", first_index=1)
        except ValueError as e:
            raise SubmitError(f"cannot write the job script: {e}") from None
        where = ", ".join(f"{k} {v!r}" for k, v in (("queue", own.queue),
                                                     ("project", own.project)) if v)
        what = (f"qsub (submitting {n} fiber job{'s as an array job' if n > 1 else ''}"
                + (f"; {where}" if where else "") + ")")
        self._submitted = True
        cp = self.run_command(argv, input=script, timeout=self.submit_timeout, what=what)
        try:
            job = parse_job_id(cp.stdout, r"^\s*(\d+)")
        except ValueError:
            raise SubmitError(f"{what}: no job id in its output", command=argv,
                              returncode=cp.returncode, stdout=cp.stdout,
                              stderr=cp.stderr) from None
        ids = [f"{job}.{i}" for i in range(1, n + 1)] if n > 1 else [job]
        handles = [JobHandle(i, self.name) for i in ids]
        now = time.monotonic()
        log = os.path.join(out_dir, f"{name}.o{job}") if n == 1 else ""
        with self._lock:
            for h in handles:
                self._jobs[h.job_id] = _Job(h, now, output=log)
        self.remember(handles)
        return handles

    # -- status --------------------------------------------------------------------------

    def _qstat(self) -> Dict[str, Row]:
        """This user's jobs as qstat lists them now, by job id (one row per task)."""
        argv = ["qstat", "-f", "-ne", "-u", user(), "-xml"]
        cp = self.run_command(argv, timeout=self.query_timeout, what="qstat")
        try:
            rows = parse_qstat(cp.stdout)
        except ValueError as e:
            raise SubmitError(f"qstat: {e}", command=argv, returncode=cp.returncode,
                              stdout=cp.stdout, stderr=cp.stderr) from None
        out: Dict[str, Row] = {}
        for row in rows:
            if row.tasks:
                for t in row.tasks:
                    out[f"{row.job}.{t}"] = row
            else:
                out[row.job] = row
        return out

    def query(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        out: Dict[str, JobStatus] = {}
        ask = []
        with self._lock:
            for h in handles:
                rec = self._jobs.get(h.job_id)
                if rec is not None and rec.final is not None:
                    out[h.job_id] = rec.final
                else:
                    ask.append(h)
        if not ask:
            return out
        rows = self._qstat()
        missing: List[_Job] = []
        stuck: List[_Job] = []
        now = time.monotonic()
        with self._lock:
            for h in ask:
                rec = self._jobs.get(h.job_id)
                if rec is None:  # a handle this process did not submit
                    rec = self._jobs[h.job_id] = _Job(h, now)
                row = rows.get(h.job_id)
                if row is None:
                    missing.append(rec)
                    continue
                rec.seen, rec.last_seen = True, now
                if "d" in row.state and not rec.cancelled:
                    rec.deleted = True
                host = row.queue.partition("@")[2]
                if host:
                    h.host = rec.handle.host = host
                st = live_status(row, rec.cancelled)
                if st.state.finished:
                    rec.final = st
                    stuck.append(rec)
                out[h.job_id] = st
        if stuck:
            out.update(self._remove_stuck(stuck))
        if missing:
            out.update(self._missing(missing))
        return out

    def _remove_stuck(self, recs: List[_Job]) -> Dict[str, JobStatus]:
        """Delete jobs that qstat would go on listing: a lost node's (still ``r``), and
        those in an error state (``Eqw``), whose reason ``qstat -j`` gives."""
        out: Dict[str, JobStatus] = {}
        for rec in recs:
            st = rec.final
            if st is None:
                continue
            if st.state is JobState.FAILED:
                why = self._error_reason(rec.handle.job_id) or (
                    f"the job could not start (qstat -j {rec.handle.job_id} said why)")
                st = rec.final = dataclasses.replace(st, reason=f"{st.reason}: {why}")
            out[rec.handle.job_id] = st
        lost = [r.handle.job_id for r in recs if r.final and r.final.state is JobState.LOST]
        failed = [r.handle.job_id for r in recs if r.handle.job_id not in lost]
        try:
            if lost:
                self._qdel(lost, forced=True)
            if failed:
                self._qdel(failed)
        except SubmitError as e:
            sys.stderr.write(f"fiber: could not delete Grid Engine job(s) "
                             f"{', '.join(lost + failed)} ({str(e).splitlines()[0]})\n")
        self.forget(lost + failed)
        return out

    def _error_reason(self, job_id: str) -> str:
        job, _ = split_id(job_id)
        try:
            cp = self.run_command(["qstat", "-j", job], what="qstat -j", check=False)
        except SubmitError:
            return ""
        return error_reason(cp.stdout)

    def _accounting(self, recs: List[_Job]) -> Dict[Tuple[str, Optional[int]], Acct]:
        """The accounting records of ``recs``' jobs: one ``qacct -j`` per job number (an
        array job's tasks come together). qacct reads the whole accounting file, which
        the qmaster writes every ``accounting_flush_time``: a job is asked again 1, 2, 4,
        8 and then every 16 s while its record is not there (a job whose child reported
        its exit is watched until then too)."""
        now = time.monotonic()
        numbers = sorted({split_id(r.handle.job_id)[0] for r in recs
                          if now - r.acct_asked >= r.acct_wait})
        for r in recs:
            if split_id(r.handle.job_id)[0] in numbers:
                r.acct_asked, r.acct_wait = now, min(max(1.0, 2 * r.acct_wait), 16.0)
        found: Dict[Tuple[str, Optional[int]], Acct] = {}
        for number in numbers:
            try:
                cp = self.run_command(["qacct", "-j", number], what="qacct", check=False)
            except SubmitError:
                continue
            for rec in parse_qacct(cp.stdout):
                if rec.job == number:
                    found[(rec.job, rec.task)] = rec  # the last record of a task
        return found

    def _missing(self, recs: List[_Job]) -> Dict[str, JobStatus]:
        """Jobs qstat no longer (or not yet) lists."""
        out: Dict[str, JobStatus] = {}
        with self._lock:
            asking = [r for r in recs if not r.cancelled and not r.deleted]
        found = self._accounting(asking) if asking else {}
        now = time.monotonic()
        with self._lock:
            for rec in recs:
                job_id = rec.handle.job_id
                acct = found.get(split_id(job_id))
                if rec.cancelled or rec.deleted:
                    st = cancelled_status(rec.cancelled)
                elif acct is not None:
                    st = acct_status(acct)
                    if acct.host and not rec.handle.host:
                        rec.handle.host = acct.host
                elif rec.seen and now - rec.last_seen < _ACCT_GRACE:
                    st = JobStatus(JobState.RUNNING, None, "ended; its accounting record "
                                   "is not written yet")
                elif rec.seen:
                    st = JobStatus(JobState.LOST, None, "ended, and Grid Engine has no "
                                   f"accounting record of it after {_ACCT_GRACE:g} s (qacct)")
                elif now - rec.submitted > _UNSEEN_GRACE:
                    st = JobStatus(JobState.LOST, None, "Grid Engine does not know this job")
                else:
                    st = JobStatus(JobState.PENDING, None, "not listed by qstat yet")
                if st.state.finished:
                    rec.final = st
                out[job_id] = st
        return out

    # -- cancel --------------------------------------------------------------------------

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
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
        if ids:
            self._qdel(ids)

    def cancel_ids(self, ids: Sequence[str], force: bool = False) -> None:
        """``qdel`` jobs by id, whoever submitted them (``fiber stop``); Grid Engine kills
        a job's processes either way (``force`` changes nothing)."""
        self._qdel(ids)

    def _qdel(self, ids: Sequence[str], forced: bool = False) -> None:
        """One ``qdel`` for ``ids`` (per 500 expressions); ``forced``: ``qdel -f``, which
        removes a lost node's job at once, where the user may (else plain ``qdel``)."""
        targets = task_expressions(ids)
        for k in range(0, len(targets), 500):
            argv = ["qdel", *(["-f"] if forced else []), *targets[k:k + 500]]
            cp = self.run_command(argv, timeout=self.cancel_timeout, what="qdel",
                                  check=False)
            if cp.returncode == 0:
                continue
            problems = [ln for ln in (cp.stdout + "\n" + cp.stderr).splitlines()
                        if ln.strip() and not any(b in ln for b in _BENIGN_QDEL)]
            if problems and forced:  # not a manager (nor ENABLE_FORCED_QDEL): plain qdel
                self._qdel(ids)
                return
            if problems:
                raise SubmitError("qdel failed", command=argv, returncode=cp.returncode,
                                  stdout=cp.stdout, stderr=cp.stderr)

    def release(self, handle: JobHandle) -> None:
        with self._lock:
            rec = self._jobs.get(handle.job_id)
            if rec is not None and rec.final is not None:
                del self._jobs[handle.job_id]

    # -- fiber run, ps, logs, stop -------------------------------------------------------

    def follow(self, handle: JobHandle) -> Optional[Iterator[str]]:
        with self._lock:
            rec = self._jobs.get(handle.job_id)
        if rec is None:
            return None
        since = time.time() - (time.monotonic() - rec.submitted)  # submitted, wall clock
        return _sge_jobs.follow(self, handle, rec.output, since)

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        return _sge_jobs.find_jobs(self, program)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        return _sge_jobs.read_logs(self, job_id, tail)

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        return _sge_jobs.remove_jobs(self, program, job_ids, until_ended=True)

    def stop_main(self, handle: JobHandle, force: bool = False) -> None:
        """The program's job, and its processes' jobs still queued (they have this
        process's program id): they would otherwise start once a slot is free, only to
        find their master gone. Running ones are left to the program's own cleanup. The
        queued ones first: the program's end frees its CPUs, and a queued job could start
        on them between the two."""
        _sge_jobs.remove_jobs(self, self.program, queued_only=True)
        self.cancel([handle], force=force)

    def cancel_unfinished(self) -> None:
        super().cancel_unfinished()
        if self.detached or self.inherited or not self._submitted:
            return
        try:
            _sge_jobs.remove_jobs(self, self.program)
        except FiberError as e:  # at exit: say so, never raise
            sys.stderr.write(f"fiber: could not delete the Grid Engine jobs of program "
                             f"{self.program} at exit ({str(e).splitlines()[0]})\n")
