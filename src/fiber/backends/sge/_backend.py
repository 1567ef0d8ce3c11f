"""The ``sge`` backend: every fiber process is a Grid Engine job (``qsub``; an array job for
many identical ones) of the ``qsub`` family (Son of Grid Engine, Open Grid Scheduler,
Univa/Altair). Grid Engine is driven through its own commands, each with a timeout
(`SubmitError` says what failed); status is one ``qstat -xml`` a poll (``qacct`` for a job
gone from it). How jobs run, the states and exit codes, lost nodes, cleanup and logs:
docs/backends/sge.md."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ...errors import BackendError, SubmitError
from .._arrays import ArrayBackend, ArrayJob, Submission
from .._base import JobHandle, JobInfo, JobSpec, JobState, JobStatus
from . import _jobs as _sge_jobs
from ._jobs import program_dir, qstat_rows
from ._settings import SgeSettings, own, time_limit_seconds
from ._status import (
    DELETED,
    Acct,
    Row,
    acct_status,
    context_arg,
    error_reason,
    live_status,
    parse_qacct,
    smallest_host_cpus,
    split_id,
    task_expressions,
)

__all__ = ["SgeBackend", "PROGRAM_ENV", "resource_args", "qmaster_host"]

#: The program's id, inherited by its processes: every job's context names it.
PROGRAM_ENV = "FIBER_SGE_PROGRAM"

#: Seconds a job gone from qstat may go without an accounting record (the qmaster writes
#: them every ``accounting_flush_time``, 15 s by default) before it is LOST.
_ACCT_GRACE = 60.0
#: Grid Engine's default ``max_aj_tasks``: a larger group is submitted as several arrays.
_MAX_ARRAY = 75000
_BENIGN_QDEL = ("does not exist", "already been deleted", "has already been deleted",
                "is already in deletion", "registered", "has deleted", "forced the deletion")


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
class _Job(ArrayJob):
    acct_asked: float = 0.0  # when qacct was last asked of it (monotonic)
    acct_wait: float = 0.0  # seconds until it may be asked again (doubling: 1, 2, 4...)


class SgeBackend(ArrayBackend[_Job, Row, Acct]):
    """Run fiber processes as Grid Engine jobs (``qsub``; array jobs for a batch)."""

    program_env = PROGRAM_ENV

    name = "sge"
    settings = SgeSettings
    cluster = "Grid Engine"
    controller = "qmaster"
    array_word = "an array job"
    index_var = "SGE_TASK_ID"
    first_index = 1
    task_separator = "."
    lister = "qstat"
    stopped_states = frozenset({"deleting"})
    queued_states = frozenset({"pending", "held"})
    unshared_output = "sge_output_dir is not shared with the node"
    others_cancel = DELETED
    acct_grace = _ACCT_GRACE
    unaccounted = (f"ended, and Grid Engine has no accounting record of it after "
                   f"{_ACCT_GRACE:g} s (qacct)")
    time_format = "seconds or [[hours:]minutes:]seconds"  # (refused when resolved)

    def locate_controller(self) -> Tuple[str, str]:
        host, source = _act_qmaster()
        if not host:
            raise BackendError(f"the sge backend cannot tell where the qmaster is: {source}")
        return host, source

    # -- submit --------------------------------------------------------------------------

    def array_size(self, n: int) -> int:
        return min(n, _MAX_ARRAY)

    def new_record(self, handle: JobHandle, submitted: float, output: str = "") -> _Job:
        return _Job(handle, submitted, output=output)

    def query_node_cpus(self) -> Optional[int]:
        """The CPUs of the smallest execution host (``qhost``); None without ``sge_pe``
        (a job has one slot then)."""
        if not own().pe:
            return None
        return smallest_host_cpus(self.run_command(["qhost"], what="qhost").stdout)

    def limit_seconds(self, text: str) -> Optional[float]:
        """``h_rt``: jobs get SIGUSR2 at it (``-notify``), and a worker that gets it
        retires (fiber.pool._retire) in the queue's ``notify`` time."""
        return time_limit_seconds(text)

    def job_name_prefix(self) -> str:
        return own().job_name_prefix

    def submission(self, specs: Sequence[JobSpec], name: str, label: str) -> Submission:
        cfg = own()
        out_dir = program_dir(self.program)
        argv = ["qsub", "-terse", "-C", "", "-S", "/bin/sh", "-r", "n", "-N", name,
                "-o", out_dir, "-j", "y", "-ac", context_arg(self.program, label)]
        if cfg.export_env:
            argv.append("-V")
        for flag, value in (("-q", cfg.queue), ("-P", cfg.project)):
            if value:
                argv += [flag, value]
        argv += resource_args(specs[0], cfg)
        avoid = self.hosts_kept_off(specs[0].avoid_hosts, ["qconf", "-sel"])
        if avoid:  # a hostname expression: not any of them
            argv += ["-l", f"h=!{avoid[0]}" if len(avoid) == 1 else f"h=!({'|'.join(avoid)})"]
        if cfg.time_limit:  # -notify: SIGUSR2 first, which the job's relay passes on
            argv += ["-notify", "-l", f"h_rt={cfg.time_limit.strip()}"]
        if len(specs) > 1:
            argv += ["-t", f"1-{len(specs)}"]
        argv += self.extra_args()  # (refused when the config is resolved)
        return Submission(argv, [("queue", cfg.queue), ("project", cfg.project)],
                          lambda job: os.path.join(out_dir, f"{name}.o{job}"))

    # -- status --------------------------------------------------------------------------

    def _qstat(self) -> Dict[str, Row]:
        """This user's jobs as qstat lists them now, by job id (one row per task)."""
        out: Dict[str, Row] = {}
        for row in qstat_rows(self, ["-f", "-ne"]):
            if row.tasks:
                for t in row.tasks:
                    out[f"{row.job}.{t}"] = row
            else:
                out[row.job] = row
        return out

    def list_jobs(self, handles: Sequence[JobHandle]) -> Dict[str, Row]:
        return self._qstat()

    def listed_status(self, rec: _Job, row: Row, now: float) -> Tuple[JobStatus, str]:
        if "d" in row.state and not rec.cancelled:
            rec.deleted = True
        return live_status(row, rec.cancelled), row.queue.partition("@")[2]

    def listed_ended(self, recs: List[_Job]) -> Dict[str, JobStatus]:
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
        return error_reason(self.output_of(["qstat", "-j", job], "qstat -j", check=False))

    def _qacct(self, recs: List[_Job]) -> Dict[Tuple[str, Optional[int]], Acct]:
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
            for rec in parse_qacct(self.output_of(["qacct", "-j", number], "qacct",
                                                  check=False)):
                if rec.job == number:
                    found[(rec.job, rec.task)] = rec  # the last record of a task
        return found

    def accounting(self, recs: List[_Job]) -> Dict[str, Acct]:
        """The `_qacct` records of the jobs neither fiber nor anyone deleted."""
        with self._lock:
            asking = [r for r in recs if not r.cancelled and not r.deleted]
        found = self._qacct(asking) if asking else {}
        out: Dict[str, Acct] = {}
        for r in recs:
            acct = found.get(split_id(r.handle.job_id))
            if acct is not None:
                out[r.handle.job_id] = acct
        return out

    def accounted_status(self, rec: _Job, acct: Acct) -> JobStatus:
        if acct.host and not rec.handle.host:
            rec.handle.host = acct.host
        return acct_status(acct, rec.cancelled, rec.deleted)

    # -- cancel --------------------------------------------------------------------------

    def cancel_ids(self, ids: Sequence[str], force: bool = False) -> None:
        """``qdel`` jobs by id, whoever submitted them (``fiber stop``); Grid Engine kills
        a job's processes either way (``force`` changes nothing)."""
        self._qdel(ids)

    def _qdel(self, ids: Sequence[str], forced: bool = False) -> None:
        """One ``qdel`` for ``ids`` (per 500 expressions); ``forced``: ``qdel -f``, which
        removes a lost node's job at once, where the user may (else plain ``qdel``)."""
        failed = self.run_cancel(["qdel", *(["-f"] if forced else [])],
                                 task_expressions(ids), _BENIGN_QDEL, stdout_too=True)
        if failed is not None and forced:  # not a manager (nor ENABLE_FORCED_QDEL)
            self._qdel(ids)
        elif failed is not None:
            raise failed

    # -- fiber run, ps, logs, stop -------------------------------------------------------

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        return _sge_jobs.find_jobs(self, program)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        return _sge_jobs.read_logs(self, job_id, tail)
