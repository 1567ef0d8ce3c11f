"""The ``slurm`` backend: every fiber process is a Slurm job (``sbatch``; a job array for
many identical ones) or, inside an allocation, a job step (``srun``). Slurm is driven
through its own commands, each with a timeout (`SubmitError` says what failed); status is
one single-job ``squeue`` per array (``sacct`` for a job gone from it). How jobs run, the
states and exit codes, cleanup and logs: docs/backends/slurm.md."""

from __future__ import annotations

import itertools
import math
import os
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from ..._process_state import here
from ...errors import ConfigError, SubmitError
from .._arrays import ArrayBackend, ArrayJob, Submission, safe_name
from .._base import JobHandle, JobInfo, JobSpec, JobStatus
from . import _jobs as _slurm_jobs
from ._jobs import ENDING, output_dir
from ._nodes import SINFO_FORMAT, node_list_command, smallest_node_cpus
from ._settings import SlurmSettings, own
from ._status import (
    PENDING_STATES,
    SCANCELLED,
    SacctRow,
    SqueueRow,
    controller_host,
    job_comment,
    parse_sacct,
    parse_squeue,
    squeue_commands,
    status_of,
    task_ranges,
)
from ._steps import Step, cancel_steps, query_steps
from ._time import notice_seconds, time_limit_seconds

__all__ = ["SlurmBackend", "OWN_JOB_ENV", "PROGRAM_ENV"]

#: Set by fiber's job script to the job's own id: a process whose ``SLURM_JOB_ID`` is its
#: own fiber job (not an allocation it was given) submits its children as jobs.
OWN_JOB_ENV = "FIBER_SLURM_OWN_JOB"
#: The program's id, inherited by its processes: every job's comment names it.
PROGRAM_ENV = "FIBER_SLURM_PROGRAM"
_DEFAULT_MAX_ARRAY = 1001  # Slurm's MaxArraySize default: indices 0..1000
_BENIGN_SCANCEL = ("Invalid job id", "already completing or completed", "Job has already finished",
                   "Job/step already completing")


# -- the backend -------------------------------------------------------------------------


class SlurmBackend(ArrayBackend[ArrayJob, SqueueRow, SacctRow]):
    """Run fiber processes as Slurm jobs (``sbatch``) or job steps (``srun``)."""

    program_env = PROGRAM_ENV

    name = "slurm"
    settings = SlurmSettings
    cluster = "Slurm"
    controller = "controller"
    array_word = "a job array"
    index_var = "SLURM_ARRAY_TASK_ID"
    first_index = 0
    task_separator = "_"
    script_setup = (f'export {OWN_JOB_ENV}="$SLURM_JOB_ID"',)
    lister = "squeue"
    stopped_states = ENDING
    unshared_output = "slurm_output_dir is not shared with the node"
    others_cancel = SCANCELLED
    unaccounted = "finished, and Slurm no longer lists it (MinJobAge passed; no accounting to ask)"
    time_format = ("a Slurm time (minutes, minutes:seconds, hours:minutes:seconds, "
                   "days-hours, ...)")

    def __init__(self) -> None:
        super().__init__()
        self._steps: Dict[str, Step] = {}
        self._step_ids = itertools.count(1)
        self._ctl_config: Optional[Dict[str, str]] = None
        self._ctl_text = ""

    # -- mode and configuration ----------------------------------------------------------

    def mode(self) -> str:
        """``jobs`` or ``steps``: what this process submits, from ``slurm_mode``."""
        mode = own().mode.strip().lower()
        if mode not in ("auto", "jobs", "steps"):
            raise ConfigError("slurm_mode", f"must be auto, jobs or steps, got {mode!r}")
        alloc = os.environ.get("SLURM_JOB_ID", "")
        if mode == "auto":
            return "steps" if alloc and alloc != os.environ.get(OWN_JOB_ENV) else "jobs"
        if mode == "steps" and not alloc:
            raise SubmitError("slurm_mode=steps runs processes as job steps of the "
                              "allocation this program runs in, but SLURM_JOB_ID is not set "
                              "(run it under sbatch or salloc, or use slurm_mode=jobs)")
        return mode

    def controller_config(self) -> Dict[str, str]:
        """``scontrol show config`` as a dict (cached once it answered)."""
        if self._ctl_config is None:
            cp = self.run_command(["scontrol", "show", "config"], timeout=self.query_timeout,
                                  what="scontrol show config")
            cfg: Dict[str, str] = {}
            for line in cp.stdout.splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    cfg[key.strip()] = value.strip()
            self._ctl_text, self._ctl_config = cp.stdout, cfg
        return self._ctl_config

    def _scontrol_text(self) -> str:
        """``scontrol show config`` (see `controller_config`): raises `SubmitError`."""
        self.controller_config()
        return self._ctl_text

    def locate_controller(self) -> Tuple[str, str]:
        return controller_host(self._scontrol_text)

    def _has_accounting(self) -> bool:
        try:
            storage = self.controller_config().get("AccountingStorageType", "")
        except SubmitError:
            return False
        return bool(storage) and not storage.endswith("/none")

    # -- submit --------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        if specs and self.mode() == "steps":
            return self._submit_steps(specs)
        return super().submit(specs)

    def array_size(self, n: int) -> int:
        return self._max_array() if n > _DEFAULT_MAX_ARRAY else n

    def new_record(self, handle: JobHandle, submitted: float, output: str = "") -> ArrayJob:
        return ArrayJob(handle, submitted, output=output)

    def _max_array(self) -> int:
        try:
            value = self.controller_config().get("MaxArraySize", "")
            return max(1, int(value.split()[0])) if value else _DEFAULT_MAX_ARRAY
        except (SubmitError, ValueError):
            return _DEFAULT_MAX_ARRAY

    def _resource_args(self, spec: JobSpec) -> List[str]:
        r = spec.resources
        args = [f"--cpus-per-task={max(1, math.ceil(r.cpu or 1))}"]
        if r.memory_mb:
            args.append(f"--mem={int(r.memory_mb)}")
        if r.gpu:
            args.append(f"--gpus={int(r.gpu)}")
        return args

    def query_node_cpus(self) -> Optional[int]:
        """The CPUs of the smallest node of the partition jobs go to (``sinfo``); None
        inside an allocation (``slurm_mode`` steps: a step a worker)."""
        if self.mode() == "steps":
            return None
        cp = self.run_command(["sinfo", "-h", "-o", SINFO_FORMAT], what="sinfo")
        return smallest_node_cpus(cp.stdout, own().partition)

    def limit_seconds(self, text: str) -> Optional[float]:
        """Slurm's ``--time`` (each job gets Slurm's notice ahead of it: `notice_seconds`)."""
        return time_limit_seconds(text)

    def job_name_prefix(self) -> str:
        return safe_name(own().job_name_prefix or "fiber")

    def submission(self, specs: Sequence[JobSpec], name: str, label: str) -> Submission:
        cfg, n = own(), len(specs)
        out = os.path.join(output_dir(), "%x-%A_%a.out" if n > 1 else "%x-%j.out")
        argv = ["sbatch", "--parsable", "--no-requeue", f"--job-name={name}",
                f"--comment={job_comment(self.program, label)}",
                f"--output={out}", "--nodes=1", "--ntasks=1", *self._resource_args(specs[0])]
        for flag, value in (("--partition", cfg.partition), ("--account", cfg.account),
                            ("--qos", cfg.qos), ("--time", cfg.time_limit)):
            if value:
                argv.append(f"{flag}={value}")
        exclude = self.hosts_kept_off(specs[0].avoid_hosts, node_list_command(cfg.partition))
        if exclude:
            argv.append(f"--exclude={','.join(exclude)}")
        limit = self.job_time_limit()
        if limit:  # the batch shell (the job's relay) gets it, and passes it on: it retires
            argv.append(f"--signal=B:USR1@{notice_seconds(limit)}")
        if n > 1:
            argv.append(f"--array=0-{n - 1}")
        argv += self.extra_args()
        where = [("partition", cfg.partition), ("account", cfg.account), ("qos", cfg.qos)]
        return Submission(argv, where,
                          lambda job: out.replace("%x", name).replace("%j", job))

    def _submit_steps(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        cfg = own()
        alloc = os.environ["SLURM_JOB_ID"]
        prefix = self.job_name_prefix()
        handles: List[JobHandle] = []
        for spec in specs:
            n = next(self._step_ids)
            name = f"{prefix}-{safe_name(spec.name)}-{here.pid}.{n}"
            argv = ["srun", "--exact", "--nodes=1", "--ntasks=1", *self._resource_args(spec),
                    f"--job-name={name}", "--kill-on-bad-exit=0", "--quiet"]
            if cfg.time_limit:
                argv.append(f"--time={cfg.time_limit}")
            argv += list(spec.command)
            env = self.command_env()
            env.pop(OWN_JOB_ENV, None)
            env.update(spec.env)
            try:
                # the step's output to a log of its own, as a batch job's (srun would pass
                # it to this process's own stdout, where the relay forwards it too: twice)
                with open(os.path.join(_slurm_jobs.output_dir(), f"{name}.out"), "ab") as log:
                    popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                             stdout=log, stderr=subprocess.STDOUT,
                                             close_fds=True)
            except OSError as e:
                if handles:
                    self.cancel(handles, force=True)
                raise SubmitError(f"cannot start a job step (srun): {e}", command=argv
                                  ) from None
            handle = JobHandle(f"{alloc}:{name}", self.name)
            with self._lock:
                self._steps[handle.job_id] = Step(handle, name, popen)
            handles.append(handle)
        self.remember(handles)
        return handles

    # -- status --------------------------------------------------------------------------

    def query(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        with self._lock:
            steps = [h for h in handles if h.job_id in self._steps]
        jobs = [h for h in handles if h.job_id not in self._steps]
        out: Dict[str, JobStatus] = {}
        if jobs:
            out.update(super().query(jobs))
        if steps:
            out.update(self._query_steps(steps))
        return out

    def list_jobs(self, handles: Sequence[JobHandle]) -> Dict[str, SqueueRow]:
        return self._squeue(sorted({h.job_id.split("_")[0] for h in handles}))

    def _squeue(self, ids: Sequence[str]) -> Dict[str, SqueueRow]:
        """squeue's rows for the jobs and arrays ``ids``: one call per id, one after the
        other, or one for this user's jobs (`squeue_commands`), so that slurmctld's cost
        is that of our jobs, not of the cluster's queue. Not in parallel: concurrent
        calls cost slurmctld more time (``sdiag``), and the watcher is not in a hurry."""
        rows: Dict[str, SqueueRow] = {}
        for argv in squeue_commands(ids, os.getuid()):
            rows.update(self._squeue_call(argv))
        return rows

    def _squeue_call(self, argv: List[str]) -> Dict[str, SqueueRow]:
        cp = self.run_command(argv, timeout=self.query_timeout, what="squeue", check=False)
        if cp.returncode != 0:
            if "Invalid job id" in cp.stderr:  # purged (MinJobAge passed)
                return {}
            raise SubmitError("squeue failed", command=argv, returncode=cp.returncode,
                              stdout=cp.stdout, stderr=cp.stderr)
        return parse_squeue(cp.stdout)

    def listed_status(self, rec: ArrayJob, row: SqueueRow,
                      now: float) -> Tuple[JobStatus, str]:
        state, nodes, reason, code = row
        host = nodes if state not in PENDING_STATES else ""
        return status_of(state, code, reason, nodes, rec.cancelled), host

    def accounting(self, recs: List[ArrayJob]) -> Dict[str, SacctRow]:
        """What ``sacct`` says of jobs squeue no longer lists (MinJobAge passed), where
        Slurm keeps accounting."""
        if not (any(r.seen for r in recs) and self._has_accounting()):
            return {}
        argv = ["sacct", "--noheader", "--parsable2", "--allocations",
                f"--jobs={','.join(r.handle.job_id for r in recs)}",
                "--format=JobID,State,ExitCode"]
        return parse_sacct(self.output_of(argv, what="sacct"))

    def accounted_status(self, rec: ArrayJob, acct: SacctRow) -> JobStatus:
        state, code = acct
        return status_of(state, code, "", rec.handle.host, rec.cancelled)

    def _query_steps(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        with self._lock:
            steps = [self._steps[h.job_id] for h in handles]
        return query_steps(self, steps, handles)

    # -- cancel --------------------------------------------------------------------------

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        with self._lock:
            steps = [self._steps[h.job_id] for h in handles if h.job_id in self._steps]
            jobs = [h for h in handles if h.job_id not in self._steps]
        super().cancel(jobs, force)
        if steps:
            cancel_steps(self, steps, "kill" if force else "term")

    def cancel_ids(self, ids: Sequence[str], force: bool = False) -> None:
        """``scancel`` jobs by id, whoever submitted them (``fiber stop``); one kill
        request per array, not one per task (`task_ranges`)."""
        failed = self.run_cancel(["scancel", *(["--signal=KILL"] if force else [])],
                                 task_ranges(ids), _BENIGN_SCANCEL)
        if failed is not None:
            raise failed

    def release(self, handle: JobHandle) -> None:
        super().release(handle)
        with self._lock:
            step = self._steps.get(handle.job_id)
            if step is not None and step.popen.poll() is not None:
                del self._steps[handle.job_id]

    # -- fiber ps, logs, stop: the batch jobs of any fiber program of this user ------------

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        return _slurm_jobs.find_jobs(self, program)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        return _slurm_jobs.read_logs(self, job_id, tail)

    def cancel_unfinished(self) -> None:
        super().cancel_unfinished()
        if self.detached:
            return
        with self._lock:
            steps = list(self._steps.values())
        for s in steps:  # reap the sruns (they end with their steps)
            try:
                s.popen.wait(timeout=self.cancel_timeout)
            except subprocess.TimeoutExpired:
                s.popen.kill()
                s.popen.wait()
