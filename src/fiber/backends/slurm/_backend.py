"""The ``slurm`` backend: every fiber process is a Slurm job, or a job step.

Slurm is driven through its own commands (``sbatch``, ``squeue``, ``scancel``,
``scontrol``, ``srun``; ``sacct`` where the cluster keeps accounting), each with a timeout:
a command that fails or hangs raises `SubmitError` with the command,
its exit code, stdout and stderr. Nothing is installed on the cluster; the nodes need the
same Python environment as the master (a shared filesystem), as with ``srun``.

Two modes (``slurm_mode``):

``jobs``
    Every process is an ``sbatch`` job; the master can run anywhere that can submit (a
    login node, or a job). Many identical jobs submitted together (a pool's workers) go
    out as **one job array** (``--array=0-N``, one ``sbatch`` call). The job script is
    handed to ``sbatch`` on stdin: it exports the environment the jobs share once and each
    array task's own job token in a ``case`` over ``$SLURM_ARRAY_TASK_ID``, then ``exec``-s
    ``python -m fiber.process._bootstrap``, so Slurm sees Python's own exit status and signals. The
    program's secret is therefore never on a command line nor in a file fiber writes; Slurm
    keeps the script, like the environment it forwards, readable by the job's owner only.
    Jobs are submitted with ``--no-requeue``: a job whose node fails ends ``NODE_FAIL`` and
    is never started twice.

``steps``
    Inside an existing allocation (``SLURM_JOB_ID`` set: a batch script or ``salloc``),
    every process is a job step, ``srun --exact -n1 ...``, started at once on the
    allocation's free CPUs (a step waits while none is free). Steps write to the master's
    stdout/stderr, like ``multiprocessing`` children; partition, account, QOS and the
    extra ``sbatch`` arguments do not apply.

``auto`` (the default) picks ``steps`` in an allocation and ``jobs`` otherwise. A fiber
process that is itself an ``sbatch`` job of fiber (its ``SLURM_JOB_ID`` is its own
single-CPU job) submits its children as jobs.

Status: the watcher of `fiber.backends._base` polls all jobs at once, with backoff; a poll
is one ``squeue -t all -r -j <id>`` per job or job array, so that each is one single-job
RPC to slurmctld (squeue given several ids loads the whole cluster's queue), or past
``ALONE`` ids (a pool whose workers were renewed one by one) one
``squeue -t all -r -u <uid>`` for this user's jobs. Slurm states map to
`JobState` as: PENDING/CONFIGURING/REQUEUED... → PENDING; RUNNING/COMPLETING/
SUSPENDED → RUNNING; COMPLETED → SUCCEEDED; FAILED/TIMEOUT/OUT_OF_MEMORY/DEADLINE → FAILED;
CANCELLED → CANCELLED; NODE_FAIL/BOOT_FAIL/PREEMPTED → LOST (with Slurm's reason). Exit
codes follow ``multiprocessing``: Slurm's ``ExitCode`` ``137:0`` is 137 and ``0:9`` is -9
(signal 9); a cancelled job is -15, or -9 after ``kill()``. A job that has vanished from
``squeue`` (finished more than ``MinJobAge`` seconds ago) is asked of ``sacct`` when the
cluster keeps accounting, else it is LOST: fiber's own exit report from the child, which
normally arrives first, then gives its exit code.

Cancel: ``scancel`` (SIGTERM, then SIGKILL after Slurm's ``KillWait``); ``force`` is
``scancel --signal=KILL``. Every job the backend submitted and has not seen finished is
cancelled when the master exits normally or by an exception; a SIGKILLed master runs no
hook, but its children's lifeline makes every started job exit (and a job that starts
later cannot fetch its payload and exits at once).

Where the master listens: ``listen_host`` if set, else the local address of the interface
that routes to the slurmctld host (``scontrol show config``: ``SlurmctldHost``), the
network the nodes share with the controller. ``JobHandle.pid`` is None (fiber uses
synthetic pids); ``JobHandle.host`` is the job's node once ``squeue`` shows it.

Job logs (stdout and stderr of each job) go to ``slurm_output_dir``, by default
``~/.fiber/slurm-logs``, created with mode 0700: the home directory, which a cluster's
nodes usually share; where it is not shared, point it at a filesystem the nodes can write.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import shlex
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ...config import Config, get_config, settings
from ...errors import ConfigError, FiberError, SubmitError
from .._base import JobHandle, JobInfo, JobSpec, JobState, JobStatus, JobWatcher
from .._batch import BatchBackend, parse_job_id, render_script, split_env
from .._common import route_toward
from . import _jobs as _slurm_jobs
from ._jobs import output_dir
from ._nodes import SINFO_FORMAT, node_list_command, smallest_node_cpus
from ._settings import SlurmSettings
from ._status import (
    PENDING_STATES,
    array_name,
    controller_address,
    controller_host,
    job_comment,
    parse_exit_pair,
    parse_raw_exit,
    parse_sacct,
    parse_squeue,
    safe_name,
    squeue_commands,
    status_of,
    task_ranges,
)
from ._steps import Step, cancel_steps, query_steps
from ._time import notice_seconds, time_limit_seconds

__all__ = ["SlurmBackend", "parse_squeue", "parse_raw_exit", "parse_exit_pair", "parse_sacct",
           "status_of", "controller_address", "OWN_JOB_ENV", "PROGRAM_ENV"]


def _own(cfg: Optional[Config] = None) -> SlurmSettings:
    """The slurm backend's settings in ``cfg`` (or the config in force)."""
    return settings(SlurmSettings, "slurm", cfg)

#: Set by fiber's job script to the job's own id: a process whose ``SLURM_JOB_ID`` is its
#: own fiber job (not an allocation it was given) submits its children as jobs.
OWN_JOB_ENV = "FIBER_SLURM_OWN_JOB"
#: The program's id, inherited by its processes: every job's comment names it.
PROGRAM_ENV = "FIBER_SLURM_PROGRAM"

#: A job that squeue has never shown is LOST after this many seconds.
_UNSEEN_GRACE = 60.0
_DEFAULT_MAX_ARRAY = 1001  # Slurm's MaxArraySize default: indices 0..1000
_BENIGN_SCANCEL = ("Invalid job id", "already completing or completed", "Job has already finished",
                   "Job/step already completing")


# -- the backend -------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    handle: JobHandle
    submitted: float
    seen: bool = False
    cancelled: Optional[str] = None  # "term" | "kill" once fiber cancelled it
    final: Optional[JobStatus] = None
    output: str = ""  # its output file (a job alone in its sbatch)


class SlurmBackend(BatchBackend):
    """Run fiber processes as Slurm jobs (``sbatch``) or job steps (``srun``)."""

    program_env = PROGRAM_ENV

    name = "slurm"
    settings = SlurmSettings

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._jobs: Dict[str, _Job] = {}
        self._steps: Dict[str, Step] = {}
        self._step_ids = itertools.count(1)
        self._ctl_config: Optional[Dict[str, str]] = None
        self._ctl_text = ""
        self._sbatched = False  # whether this process submitted batch jobs

    #: Shortest interval between two status polls: each is a ``squeue`` RPC to slurmctld,
    #: which a shared controller should not get 20 times a second. Normal exits do not
    #: wait for a poll (the child reports its exit code itself).
    poll_min_interval = 0.25
    poll_max_interval = 2.0

    def watcher(self) -> JobWatcher:
        with self._lock:
            w = self.__dict__.get("_watcher")
            if w is None:
                w = self.__dict__["_watcher"] = JobWatcher(
                    self, self.poll_min_interval, self.poll_max_interval)
            return w

    # -- mode and configuration ----------------------------------------------------------

    def mode(self) -> str:
        """``jobs`` or ``steps``: what this process submits, from ``slurm_mode``."""
        mode = _own().mode.strip().lower()
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

    def listen_host(self) -> str:
        cfg = get_config()
        if cfg.listen_host:
            return cfg.listen_host
        host, source = controller_host(self._scontrol_text)
        return route_toward(host, f"the Slurm controller {host!r}", f"check {source}",
                            "the nodes")

    def _accounting(self) -> bool:
        try:
            storage = self.controller_config().get("AccountingStorageType", "")
        except SubmitError:
            return False
        return bool(storage) and not storage.endswith("/none")

    # -- submit --------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        if not specs:
            return []
        if self.mode() == "steps":
            return self._submit_steps(specs)
        groups: Dict[Tuple[Any, ...], List[int]] = {}
        for i, spec in enumerate(specs):
            groups.setdefault((tuple(spec.command), spec.resources, spec.avoid_hosts),
                              []).append(i)
        handles: List[Optional[JobHandle]] = [None] * len(specs)
        try:
            for indexes in groups.values():
                size = self._max_array() if len(indexes) > _DEFAULT_MAX_ARRAY else len(indexes)
                for k in range(0, len(indexes), size):
                    chunk = indexes[k:k + size]
                    for i, h in zip(chunk, self._sbatch([specs[i] for i in chunk])):
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
        return smallest_node_cpus(cp.stdout, _own().partition)

    def job_time_limit(self) -> Optional[float]:
        """``slurm_time_limit`` in seconds (None if unset): a pool renews its workers
        before it (see fiber.pool._renew), and each job gets Slurm's notice ahead of it.

        Raises:
            ConfigError: it is not in a format of Slurm's ``--time``.
        """
        text = _own().time_limit.strip()
        if not text:
            return None
        seconds = time_limit_seconds(text)
        if seconds is None:
            raise ConfigError("slurm_time_limit", f"{text!r} is not a Slurm time (minutes, "
                              "minutes:seconds, hours:minutes:seconds, days-hours, ...)")
        return seconds

    def _sbatch(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        cfg = get_config()
        n = len(specs)
        prefix = safe_name(_own(cfg).job_name_prefix or "fiber")
        label = specs[0].name if n == 1 else array_name([s.name for s in specs])
        name = f"{prefix}-{safe_name(label)}"
        out = os.path.join(output_dir(), "%x-%A_%a.out" if n > 1 else "%x-%j.out")
        argv = ["sbatch", "--parsable", "--no-requeue", f"--job-name={name}",
                f"--comment={job_comment(self.program, label)}",
                f"--output={out}", "--nodes=1", "--ntasks=1", *self._resource_args(specs[0])]
        for flag, value in (("--partition", _own(cfg).partition),
                            ("--account", _own(cfg).account), ("--qos", _own(cfg).qos),
                            ("--time", _own(cfg).time_limit)):
            if value:
                argv.append(f"{flag}={value}")
        exclude = self.hosts_kept_off(specs[0].avoid_hosts,
                                      node_list_command(_own(cfg).partition))
        if exclude:
            argv.append(f"--exclude={','.join(exclude)}")
        limit = self.job_time_limit()
        if limit:  # the batch shell (the job's relay) gets it, and passes it on: it retires
            argv.append(f"--signal=B:USR1@{notice_seconds(limit)}")
        if n > 1:
            argv.append(f"--array=0-{n - 1}")
        try:
            argv += shlex.split(_own(cfg).extra_args)
        except ValueError as e:
            raise ConfigError("slurm_extra_args", f"cannot split {_own(cfg).extra_args!r}: {e}"
                              ) from None
        common, own = split_env([{**s.env, PROGRAM_ENV: self.program} for s in specs])
        try:
            script = render_script(specs[0].command, common, own,
                                   index_var="SLURM_ARRAY_TASK_ID",
                                   setup=[f'export {OWN_JOB_ENV}="$SLURM_JOB_ID"'])
        except ValueError as e:
            raise SubmitError(f"cannot write the job script: {e}") from None
        where = ", ".join(f"{k} {v!r}" for k, v in (
            ("partition", _own(cfg).partition), ("account", _own(cfg).account),
            ("qos", _own(cfg).qos)) if v)
        what = (f"sbatch (submitting {n} fiber job{'s as a job array' if n > 1 else ''}"
                + (f"; {where}" if where else "") + ")")
        self._sbatched = True
        cp = self.run_command(argv, input=script, timeout=self.submit_timeout, what=what)
        try:
            job_id = parse_job_id(cp.stdout, r"^\s*(\d+)")
        except ValueError:
            raise SubmitError(f"{what}: no job id in its output", command=argv,
                              returncode=cp.returncode, stdout=cp.stdout,
                              stderr=cp.stderr) from None
        ids = [f"{job_id}_{i}" for i in range(n)] if n > 1 else [job_id]
        handles = [JobHandle(i, self.name) for i in ids]
        now = time.monotonic()
        with self._lock:
            for h in handles:
                self._jobs[h.job_id] = _Job(h, now, output=out.replace("%x", name).replace(
                    "%j", job_id) if n == 1 else "")
        self.remember(handles)
        return handles

    def _submit_steps(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        cfg = get_config()
        alloc = os.environ["SLURM_JOB_ID"]
        prefix = safe_name(_own(cfg).job_name_prefix or "fiber")
        handles: List[JobHandle] = []
        for spec in specs:
            n = next(self._step_ids)
            name = f"{prefix}-{safe_name(spec.name)}-{os.getpid()}.{n}"
            argv = ["srun", "--exact", "--nodes=1", "--ntasks=1", *self._resource_args(spec),
                    f"--job-name={name}", "--kill-on-bad-exit=0", "--quiet"]
            if _own(cfg).time_limit:
                argv.append(f"--time={_own(cfg).time_limit}")
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
            out.update(self._query_jobs(jobs))
        if steps:
            out.update(self._query_steps(steps))
        return out

    def _squeue(self, ids: Sequence[str]) -> Dict[str, Tuple[str, str, str, Optional[int]]]:
        """squeue's rows for the jobs and arrays ``ids``: one call per id, one after the
        other, or one for this user's jobs (`squeue_commands`), so that slurmctld's cost
        is that of our jobs, not of the cluster's queue. Not in parallel: concurrent
        calls cost slurmctld more time (``sdiag``), and the watcher is not in a hurry."""
        rows: Dict[str, Tuple[str, str, str, Optional[int]]] = {}
        for argv in squeue_commands(ids, os.getuid()):
            rows.update(self._squeue_call(argv))
        return rows

    def _squeue_call(self, argv: List[str]) -> Dict[str, Tuple[str, str, str, Optional[int]]]:
        cp = self.run_command(argv, timeout=self.query_timeout, what="squeue", check=False)
        if cp.returncode != 0:
            if "Invalid job id" in cp.stderr:  # purged (MinJobAge passed)
                return {}
            raise SubmitError("squeue failed", command=argv, returncode=cp.returncode,
                              stdout=cp.stdout, stderr=cp.stderr)
        return parse_squeue(cp.stdout)

    def _query_jobs(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
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
        rows = self._squeue(sorted({h.job_id.split("_")[0] for h in ask}))
        missing = []
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
                rec.seen = True
                state, nodes, reason, code = row
                if nodes and state not in PENDING_STATES:
                    h.host = rec.handle.host = nodes
                st = status_of(state, code, reason, nodes, rec.cancelled)
                if st.state.finished:
                    rec.final = st
                out[h.job_id] = st
        if missing:
            out.update(self._missing(missing))
        return out

    def _missing(self, recs: List[_Job]) -> Dict[str, JobStatus]:
        """Jobs squeue no longer (or not yet) lists."""
        out: Dict[str, JobStatus] = {}
        found: Dict[str, Tuple[str, Optional[int]]] = {}
        if any(r.seen for r in recs) and self._accounting():
            argv = ["sacct", "--noheader", "--parsable2", "--allocations",
                    f"--jobs={','.join(r.handle.job_id for r in recs)}",
                    "--format=JobID,State,ExitCode"]
            try:
                found = parse_sacct(self.run_command(argv, what="sacct").stdout)
            except SubmitError:
                found = {}
        now = time.monotonic()
        with self._lock:
            for rec in recs:
                job_id = rec.handle.job_id
                if job_id in found:
                    state, code = found[job_id]
                    st = status_of(state, code, "", rec.handle.host, rec.cancelled)
                elif rec.cancelled:  # ended as asked: a pending one at once (not a
                    # minute later, as unknown: a pool terminated as it started waited)
                    st = status_of("CANCELLED", None, "", rec.handle.host, rec.cancelled)
                elif rec.seen:
                    st = JobStatus(JobState.LOST, None, "finished, and Slurm no longer lists "
                                   "it (MinJobAge passed; no accounting to ask)")
                elif now - rec.submitted > _UNSEEN_GRACE:
                    st = JobStatus(JobState.LOST, None, "Slurm does not know this job")
                else:
                    st = JobStatus(JobState.PENDING, None, "not listed by squeue yet")
                if st.state.finished:
                    rec.final = st
                out[job_id] = st
        return out

    def _query_steps(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        with self._lock:
            steps = [self._steps[h.job_id] for h in handles]
        return query_steps(self, steps, handles)

    # -- cancel --------------------------------------------------------------------------

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        how = "kill" if force else "term"
        with self._lock:
            steps = [self._steps[h.job_id] for h in handles if h.job_id in self._steps]
            ids = []
            for h in handles:
                if h.job_id in self._steps:
                    continue
                rec = self._jobs.get(h.job_id)
                if rec is not None:
                    if rec.final is not None:
                        continue
                    if rec.cancelled != "kill":
                        rec.cancelled = how
                ids.append(h.job_id)
        if ids:
            try:
                self._scancel(ids, force)
            except SubmitError:  # not cancelled: not to be taken for so (see _missing)
                with self._lock:
                    for job_id in ids:
                        rec = self._jobs.get(job_id)
                        if rec is not None and rec.cancelled == how:
                            rec.cancelled = None
                raise
        if steps:
            cancel_steps(self, steps, how)

    def cancel_ids(self, ids: Sequence[str], force: bool = False) -> None:
        """``scancel`` jobs by id, whoever submitted them (``fiber stop``)."""
        self._scancel(ids, force)

    def _scancel(self, ids: Sequence[str], force: bool) -> None:
        targets = task_ranges(ids)  # one kill request per array, not one per task
        for k in range(0, len(targets), 500):
            argv = ["scancel", *(["--signal=KILL"] if force else []), *targets[k:k + 500]]
            cp = self.run_command(argv, timeout=self.cancel_timeout, what="scancel",
                                  check=False)
            if cp.returncode != 0:
                problems = [ln for ln in cp.stderr.splitlines()
                            if ln.strip() and not any(b in ln for b in _BENIGN_SCANCEL)]
                if problems:
                    raise SubmitError("scancel failed", command=argv,
                                      returncode=cp.returncode, stdout=cp.stdout,
                                      stderr=cp.stderr)

    def release(self, handle: JobHandle) -> None:
        with self._lock:
            rec = self._jobs.get(handle.job_id)
            if rec is not None and rec.final is not None:
                del self._jobs[handle.job_id]
            step = self._steps.get(handle.job_id)
            if step is not None and step.popen.poll() is not None:
                del self._steps[handle.job_id]

    def follow(self, handle: JobHandle) -> Optional[Iterator[str]]:
        with self._lock:
            rec = self._jobs.get(handle.job_id)
        if rec is None:
            return None
        since = time.time() - (time.monotonic() - rec.submitted)  # submitted, wall clock
        return _slurm_jobs.follow(self, handle, rec.output, since)

    # -- fiber ps, logs, stop: the batch jobs of any fiber program of this user ------------

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        return _slurm_jobs.find_jobs(self, program)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        return _slurm_jobs.read_logs(self, job_id, tail)

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        return _slurm_jobs.remove_jobs(self, program, job_ids, until_ended=True)

    def stop_main(self, handle: JobHandle, force: bool = False) -> None:
        """The program's job, and its processes' jobs still queued (they have this
        process's program id): they would otherwise start once a CPU is freed, only to
        find their master gone. Running ones are left to the program's own cleanup. The
        queued ones first: the program's end frees its CPUs, and a queued job could start
        on them between the two."""
        _slurm_jobs.remove_jobs(self, self.program, force=force, queued_only=True)
        self.cancel([handle], force=force)

    def cancel_unfinished(self) -> None:
        super().cancel_unfinished()
        if self.detached:
            return
        if not self.inherited and self._sbatched:
            try:
                _slurm_jobs.remove_jobs(self, self.program)
            except FiberError as e:  # at exit: say so, never raise
                sys.stderr.write(f"fiber: could not cancel the Slurm jobs of program "
                                 f"{self.program} at exit ({str(e).splitlines()[0]})\n")
        with self._lock:
            steps = list(self._steps.values())
        for s in steps:  # reap the sruns (they end with their steps)
            try:
                s.popen.wait(timeout=self.cancel_timeout)
            except subprocess.TimeoutExpired:
                s.popen.kill()
                s.popen.wait()
