"""What Slurm's commands print, read: ``squeue``/``sacct`` output and exit codes, Slurm job
states as fiber's `JobStatus`, ``scontrol show config``; and the names and comments
fiber gives jobs. Pure functions, tested without a cluster."""

from __future__ import annotations

import datetime
import os
import re
import signal
from types import MappingProxyType
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ...errors import BackendError, SubmitError
from .._arrays import index_spans
from .._base import JobState, JobStatus
from .._batch_status import cancelled_status, cause_code, exit_status, exit_words, shell_code

__all__ = ["parse_squeue", "parse_raw_exit", "parse_exit_pair", "parse_sacct", "status_of",
           "controller_address", "controller_host", "step_status", "SQUEUE_FORMAT",
           "SqueueRow", "SacctRow",
           "PENDING_STATES", "LIST_FORMAT", "Listed", "job_comment", "parse_listing",
           "stdout_path", "task_ranges", "squeue_commands", "ALONE", "SCANCELLED"]

#: A job as ``squeue`` lists it: state, nodes, reason, exit code (`parse_squeue`).
SqueueRow = Tuple[str, str, str, Optional[int]]
#: A job as ``sacct`` has it: state, exit code (`parse_sacct`).
SacctRow = Tuple[str, Optional[int]]

SQUEUE_FORMAT = "JobArrayID:|,State:|,NodeList:|,Reason:|,exit_code:|"
#: ``squeue -O`` of ``fiber ps``: the comment last, unpadded by the split below.
LIST_FORMAT = "JobArrayID:|,State:|,SubmitTime:|,Comment:1000"
_COMMENT_TAG = "fiber"
#: Up to this many job ids, a poll asks ``squeue`` for each on its own (see
#: `squeue_commands`); past it, for the user's jobs in one call. A single-job RPC costs
#: slurmctld ~0.2-0.3 ms, a load of every job 1.5-3 µs a job record (``sdiag``, 22.05):
#: ten single-job RPCs (the 10 arrays of a 10,000-worker pool) cost less than one load
#: of any queue over ~1,000 records, and the master 10 ``squeue`` processes.
ALONE = 10

PENDING_STATES = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                            "RESV_DEL_HOLD", "POWER_UP_NODE"})
_RUNNING = frozenset({"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING",
                      "STAGE_OUT", "UPDATE_DB"})
_LOST = MappingProxyType({"NODE_FAIL": "its node failed", "BOOT_FAIL": "its node failed to boot",
                          "PREEMPTED": "preempted", "REVOKED": "revoked (federation)"})
_FAILED = MappingProxyType({"FAILED": "", "TIMEOUT": "time limit reached",
                            "OUT_OF_MEMORY": "out of memory",
                            "DEADLINE": "deadline reached", "SPECIAL_EXIT": "special exit"})
#: A job someone cancelled (``scancel``: SIGTERM), as fiber reports it.
SCANCELLED = ("cancelled (scancel)", -signal.SIGTERM)
#: The signal a limit's state stands for, where the status word gives none.
_KILLED_BY = MappingProxyType({"OUT_OF_MEMORY": signal.SIGKILL, "TIMEOUT": signal.SIGTERM,
                               "DEADLINE": signal.SIGTERM})


def parse_raw_exit(raw: str) -> Optional[int]:
    """``squeue -O exit_code`` (a wait status: code << 8 | signal) in ``multiprocessing``
    convention: the exit code, or minus the signal that ended the job."""
    raw = raw.strip()
    if not raw.lstrip("-").isdigit():
        return None
    status = int(raw)
    if status < 0:
        return None
    sig = status & 0x7F
    return -sig if sig else (status >> 8) & 0xFF


def parse_exit_pair(pair: str) -> Optional[int]:
    """Slurm's ``ExitCode`` ``"code:signal"`` (scontrol, sacct) as above."""
    m = re.match(r"^\s*(\d+):(\d+)\s*$", pair)
    if m is None:
        return None
    code, sig = int(m.group(1)), int(m.group(2))
    return -sig if sig else code


def parse_squeue(stdout: str) -> Dict[str, SqueueRow]:
    """``{job id: (state, nodes, reason, exit code)}`` from ``squeue -O`` with
    `SQUEUE_FORMAT` (array tasks as ``<array id>_<index>``)."""
    rows: Dict[str, SqueueRow] = {}
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or not parts[0].strip():
            continue
        job_id, state, nodes, reason, raw = (p.strip() for p in parts[:5])
        state = state.split()[0].upper() if state else ""
        rows[job_id] = (state, "" if nodes in ("(null)", "None") else nodes,
                        "" if reason in ("None", "(null)") else reason, parse_raw_exit(raw))
    return rows


def squeue_commands(ids: Sequence[str], uid: int, alone: int = ALONE) -> List[List[str]]:
    """The ``squeue`` calls that show the jobs ``ids`` (job ids and job-array ids; an
    array's tasks one a line): one call per id up to ``alone`` ids, else one call for all
    of user ``uid``'s jobs, of which the caller keeps those it asked for.

    Why: given **one** job id, squeue asks slurmctld for that job alone
    (REQUEST_JOB_INFO_SINGLE; an array comes with its tasks), a cost in proportion to
    the job; given several, it asks for every job in the cluster and filters them itself
    (REQUEST_JOB_INFO), a cost in proportion to the whole cluster's queue. Given one user
    and no id, slurmctld packs that user's jobs only (REQUEST_JOB_USER_INFO): the cost of
    many ids (a pool whose workers were renewed one by one) in one call. (squeue takes
    uid 0 for no user: root's call loads every job, as several ids do.)
    """
    head = ["squeue", "--noheader", "--array", "--states=all"]
    tail = f"--Format={SQUEUE_FORMAT}"
    if len(ids) <= alone:
        return [[*head, f"--jobs={job_id}", tail] for job_id in ids]
    return [[*head, f"--user={uid}", tail]]


def parse_sacct(stdout: str) -> Dict[str, SacctRow]:
    """``{job id: (state, exit code)}`` from ``sacct -n -P -X -o JobID,State,ExitCode``."""
    rows: Dict[str, SacctRow] = {}
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0].strip():
            continue
        state = parts[1].split()[0].upper() if parts[1].strip() else ""
        rows[parts[0].strip()] = (state, parse_exit_pair(parts[2]))
    return rows


def status_of(state: str, exitcode: Optional[int], reason: str = "", nodes: str = "",
              cancelled: Optional[str] = None) -> JobStatus:
    """A `JobStatus` from a Slurm job state; ``cancelled`` is ``"kill"`` or
    ``"term"`` when fiber cancelled the job."""
    if state in PENDING_STATES:
        return JobStatus(JobState.PENDING, None, reason)
    if state in _RUNNING or not state:
        return JobStatus(JobState.RUNNING, None, reason)
    if state == "COMPLETED":
        return JobStatus(JobState.SUCCEEDED, 0)
    if state == "CANCELLED":
        return cancelled_status(cancelled, *SCANCELLED)
    if state in _LOST:
        where = f" ({nodes})" if nodes and state in ("NODE_FAIL", "BOOT_FAIL") else ""
        why = f"Slurm {state}: {_LOST[state]}{where}" + (f", reason {reason}" if reason else "")
        return JobStatus(JobState.LOST, None, why)
    if state in _FAILED:
        # no failure in the status word: say why from the state
        exitcode = cause_code(exitcode, _KILLED_BY.get(state))
        what = _FAILED[state] or exit_words(exitcode)
        if reason == "NonZeroExitCode" or (reason == "JobLaunchFailure" and exitcode < 0):
            # slurmctld gives any batch script that a signal ended the reason FAIL_LAUNCH
            # ("JobLaunchFailure"), though it ran: the signal is the reason
            reason = ""
        return JobStatus(JobState.FAILED, exitcode, f"Slurm {state}: {what}"
                         + (f" ({reason})" if reason else ""))
    return JobStatus(JobState.LOST, None, f"unknown Slurm state {state!r}")


def controller_address(config_text: str) -> str:
    """The slurmctld host in ``scontrol show config`` output or a slurm.conf: the address
    in parentheses (``ctl(10.0.0.2)``) if given, else the host name."""
    for line in config_text.splitlines():
        line = line.split("#", 1)[0].strip()
        m = re.match(r"^(SlurmctldHost(?:\[0\])?|ControlAddr|ControlMachine)\s*=\s*(\S+)",
                     line, re.IGNORECASE)
        if m:
            value = m.group(2)
            inner = re.search(r"\(([^)]+)\)", value)
            if inner:
                return inner.group(1)
            return value.split(",")[0]
    return ""


def controller_host(scontrol_text: Callable[[], str]) -> Tuple[str, str]:
    """The controller's host and where it was found: ``scontrol show config`` (its text,
    from ``scontrol_text``, which raises `SubmitError` if scontrol fails), else slurm.conf
    (read here, when scontrol cannot reach the controller).

    Raises:
        BackendError: neither names it. Slurm is then not set up or not reachable from
            here (scontrol's own words say which): no ``listen_host`` would mend that.
    """
    failed = ""
    try:
        host = controller_address(scontrol_text())
        if host:
            return host, "`scontrol show config`"
    except SubmitError as e:
        lines = [ln.strip() for ln in e.stderr.splitlines() if ln.strip()]
        failed = str(e).splitlines()[0] + (": " + "; ".join(lines[-4:]) if lines else "")
    paths = [os.environ.get("SLURM_CONF", ""), "/etc/slurm/slurm.conf",
             "/etc/slurm-llnl/slurm.conf"]
    for path in filter(None, paths):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                host = controller_address(f.read())
        except OSError:
            continue
        if host:
            return host, f"SlurmctldHost in {path}"
    if failed:
        raise BackendError(f"Slurm is not reachable from here ({failed}), and no "
                           "slurm.conf names its controller (looked at "
                           f"{', '.join(filter(None, paths))}): run this where Slurm's "
                           "commands work (a login node), or point SLURM_CONF at the "
                           "cluster's slurm.conf")
    raise BackendError("the slurm backend cannot tell which network the nodes share "
                       "with this process: `scontrol show config` names no "
                       "SlurmctldHost; set listen_host (FIBER_LISTEN_HOST) to this "
                       "host's cluster address")


def step_status(rc: Optional[int], cancelled: Optional[str]) -> JobStatus:
    """A step's status from its ``srun``'s exit status (128 + n: the task got signal n)."""
    if rc is None:
        return JobStatus(JobState.RUNNING)
    if rc and cancelled:
        return cancelled_status(cancelled, "")
    if rc < 0:  # srun itself was killed
        return JobStatus(JobState.FAILED, rc, f"srun {exit_words(rc)}")
    return exit_status(shell_code(rc))


def job_comment(program: str, name: str) -> str:
    """The ``--comment`` of a fiber job: ``fiber <program id> <name>``, which ``fiber ps``
    reads back (Slurm keeps no labels; the comment is the field it shows for any job)."""
    return " ".join(f"{_COMMENT_TAG} {program} {name}".split())[:250]


class Listed(NamedTuple):
    """A fiber job as ``squeue`` lists it."""

    job_id: str
    program: str
    name: str
    state: str  # Slurm's word, lower case ("running", "cancelled", ...)
    submitted: str  # ISO 8601, UTC ("" when Slurm gave none)


def parse_listing(stdout: str) -> List[Listed]:
    """The fiber jobs (those with a `job_comment`) in ``squeue -O`` output with
    `LIST_FORMAT`, in the order listed; other jobs are left out."""
    rows = []
    for line in stdout.splitlines():
        parts = line.split("|", 3)
        if len(parts) < 4:
            continue
        job_id, state, submitted, comment = (p.strip() for p in parts)
        words = comment.split(" ", 2)
        if len(words) < 2 or words[0] != _COMMENT_TAG or not job_id:
            continue
        rows.append(Listed(job_id, words[1], words[2] if len(words) > 2 else "",
                           state.split()[0].lower() if state else "", _utc(submitted)))
    return rows


def _utc(local: str) -> str:
    """Slurm's ``2026-11-23T16:20:01`` (the controller's local time, as this host reads
    it) in UTC; "" for ``N/A`` or ``Unknown``."""
    try:
        when = datetime.datetime.strptime(local, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return ""
    return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stdout_path(scontrol_job: str) -> str:
    """The ``StdOut=`` of ``scontrol show job`` output ("" when absent)."""
    m = re.search(r"^\s*StdOut=(.*?)\s*$", scontrol_job, re.MULTILINE)
    return m.group(1) if m else ""


def task_ranges(ids: Sequence[str], limit: int = 500) -> List[str]:
    """``ids`` for ``scancel``, the tasks of each job array joined into expressions
    ``<array>_[0-99,105]`` of up to ``limit`` tasks: scancel sends slurmctld one kill
    request per id it is given, and one per expression (a pool of 10,000 workers would
    otherwise end with 10,000 requests). Other ids (a job, a step) are kept as given;
    arrays come in the order first seen."""
    tasks: Dict[str, List[int]] = {}
    out: List[str] = []
    for job_id in ids:
        base, sep, index = job_id.partition("_")
        if sep and base.isdigit() and index.isdigit():
            if base not in tasks:
                tasks[base] = []
                out.append(base)  # its place in the order: replaced below
            tasks[base].append(int(index))
        else:
            out.append(job_id)
    result: List[str] = []
    for item in out:
        if item not in tasks:
            result.append(item)
            continue
        indexes = sorted(set(tasks.pop(item)))
        for k in range(0, len(indexes), limit):
            result.append(_array_expression(item, indexes[k:k + limit]))
    return result


def _array_expression(base: str, indexes: List[int]) -> str:
    """``base_i`` for one index, else ``base_[a-b,c,...]`` (``indexes`` sorted)."""
    if len(indexes) == 1:
        return f"{base}_{indexes[0]}"
    spans = (str(a) if a == b else f"{a}-{b}" for a, b in index_spans(indexes))
    return f"{base}_[{','.join(spans)}]"
