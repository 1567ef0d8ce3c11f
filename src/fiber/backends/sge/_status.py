"""What Grid Engine's commands print, read: ``qstat -xml`` listings, ``qacct`` records,
task-id ranges; Grid Engine job states as fiber's `JobStatus`; and the names and context
fiber gives jobs. Pure functions, tested without a cluster.

Job ids: a job alone is ``<job number>`` (``123``); a task of an array job (``qsub -t
1-N``) is ``<job number>.<task id>`` (``123.4``), as ``qdel`` and ``qacct`` write them.
"""

from __future__ import annotations

import datetime
import re
import signal
import urllib.parse
import xml.etree.ElementTree as ET
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

from .._arrays import index_spans
from .._base import JobState, JobStatus
from .._batch_status import cancelled_status as _cancelled_status
from .._batch_status import cause_code, exit_status, shell_code

__all__ = ["Row", "parse_qstat", "parse_tasks", "task_expressions", "split_id", "Acct",
           "parse_qacct", "acct_status", "live_status", "context_arg", "Listed",
           "parse_contexts", "cancelled_status", "error_reason", "PROGRAM_VAR", "NAME_VAR",
           "smallest_host_cpus", "DELETED"]

#: Job context variables (``qsub -ac``) that mark a fiber job: its program's id and its
#: name for people (``fiber ps``); job names are too restricted to hold either.
PROGRAM_VAR = "fiber_program"
NAME_VAR = "fiber_name"
#: A job someone deleted (``qdel``: SIGKILL), as fiber reports it.
DELETED = ("deleted (qdel)", -signal.SIGKILL)


class Row(NamedTuple):
    """A job, or a range of tasks of an array job, as ``qstat -f -xml`` lists it."""

    job: str  # the job number
    tasks: Tuple[int, ...]  # its task ids (() for a job that is no array)
    state: str  # Grid Engine's letters: qw, hqw, r, t, dr, Eqw, ...
    name: str
    queue: str  # the queue instance it runs in (all.q@node2), "" when pending
    queue_state: str  # that queue instance's state letters ("u": its host is unknown)
    submitted: str  # ISO 8601 as qstat gives it (local time), submission or start


def parse_tasks(text: str) -> Tuple[int, ...]:
    """The task ids of a ``<tasks>`` expression: ``5``, ``6-12:1``, ``1-3:1,7``.

    Raises:
        ValueError: the text is no task expression.
    """
    out: List[int] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item)
        if m is None:
            raise ValueError(f"not a task range: {item!r}")
        first = int(m.group(1))
        last = int(m.group(2) or first)
        step = int(m.group(3) or 1)
        out.extend(range(first, last + 1, max(step, 1)))
    return tuple(out)


def _text(elem: ET.Element, tag: str) -> str:
    found = elem.find(tag)
    return (found.text or "").strip() if found is not None else ""


def parse_qstat(xml: str) -> List[Row]:
    """The jobs of ``qstat -f -xml`` (running ones inside their queue instance, whose
    state comes along) or ``qstat -xml`` (the queue instance in ``queue_name``).

    Raises:
        ValueError: the text is not qstat's XML.
    """
    if not xml.strip():  # (some versions print nothing at all when no job is listed)
        return []
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"qstat printed no XML ({e})") from None
    rows: List[Row] = []
    # `qstat -f`: Queue-List elements, each with its state and the jobs running in it
    seen = set()
    for queue in root.iter("Queue-List"):
        qname, qstate = _text(queue, "name"), _text(queue, "state")
        for job in queue.findall("job_list"):
            seen.add(id(job))
            rows.append(_row(job, qname, qstate))
    for job in root.iter("job_list"):
        if id(job) not in seen:
            rows.append(_row(job, _text(job, "queue_name"), ""))
    return rows


def _row(job: ET.Element, queue: str, queue_state: str) -> Row:
    tasks = _text(job, "tasks")
    return Row(_text(job, "JB_job_number"), parse_tasks(tasks) if tasks else (),
               _text(job, "state"), _text(job, "JB_name"), queue, queue_state,
               _text(job, "JAT_start_time") or _text(job, "JB_submission_time"))


def split_id(job_id: str) -> Tuple[str, Optional[int]]:
    """``("123", 4)`` for ``123.4``, ``("123", None)`` for ``123``.

    Raises:
        ValueError: not a Grid Engine job id.
    """
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?", job_id.strip())
    if m is None:
        raise ValueError(f"{job_id!r} is not a Grid Engine job id (123, or 123.4 for a "
                         "task of an array job)")
    return m.group(1), int(m.group(2)) if m.group(2) else None


def task_expressions(ids: Iterable[str]) -> List[str]:
    """``ids`` for one ``qdel`` call: the tasks of each array job joined into ranges
    (``12.1-5 12.9``); other ids as given, in the order first seen."""
    tasks: Dict[str, List[int]] = {}
    order: List[str] = []
    for job_id in ids:
        job, task = split_id(job_id)
        if job not in tasks:
            tasks[job] = []
            order.append(job)
        if task is not None:
            tasks[job].append(task)
    out: List[str] = []
    for job in order:
        indexes = sorted(set(tasks[job]))
        if not indexes:
            out.append(job)
        out += [f"{job}.{a}" if a == b else f"{job}.{a}-{b}" for a, b in index_spans(indexes)]
    return out


# -- live states -------------------------------------------------------------------------

def live_status(row: Row, cancelled: Optional[str] = None) -> JobStatus:
    """A listed job's `JobStatus`. Error states (``Eqw``: the job could not start) are
    FAILED; a running job whose queue instance is in state ``u`` (its host stopped
    answering the qmaster) is LOST; anything else listed is live (``d``: being deleted)."""
    host = row.queue.partition("@")[2]
    if "E" in row.state:
        return JobStatus(JobState.FAILED, None, f"Grid Engine error state {row.state}")
    if "u" in row.queue_state and ("r" in row.state or "t" in row.state):
        return JobStatus(JobState.LOST, None, f"its node {host} stopped answering Grid "
                         f"Engine (queue instance {row.queue} in state {row.queue_state})")
    if "r" in row.state or "t" in row.state or row.state.lower().replace("d", "") in (
            "s", "t", "rs", "rt"):
        return JobStatus(JobState.RUNNING, None, f"on {host}" if host else "")
    if "q" in row.state or "h" in row.state or "w" in row.state:
        return JobStatus(JobState.PENDING, None, row.state)
    return JobStatus(JobState.RUNNING, None, row.state)


def error_reason(qstat_j: str) -> str:
    """Why a job is in an error state: the ``error reason`` lines of ``qstat -j <job>``
    without their time stamps, joined."""
    reasons = []
    for line in qstat_j.splitlines():
        m = re.match(r"^error reason\s+\d+:\s*(?:\S+ \S+ \[[^\]]*\]:\s*)?(.*?)\s*$", line)
        if m and m.group(1):
            reasons.append(m.group(1))
    return "; ".join(dict.fromkeys(reasons))


# -- accounting --------------------------------------------------------------------------

class Acct(NamedTuple):
    """One ``qacct -j`` record: a job's, or a task's, end."""

    job: str
    task: Optional[int]
    host: str
    failed: int
    failed_text: str
    exit_status: int


def parse_qacct(stdout: str) -> List[Acct]:
    """The records of ``qacct -j <job>`` output, in order."""
    out: List[Acct] = []
    for block in re.split(r"^={10,}\s*$", stdout, flags=re.MULTILINE):
        fields: Dict[str, str] = {}
        for line in block.splitlines():
            key, _, value = line.strip().partition(" ")
            if key:
                fields[key] = value.strip()
        if "jobnumber" not in fields or "exit_status" not in fields:
            continue
        failed_word, _, failed_text = fields.get("failed", "0").partition(":")
        try:
            failed = int(failed_word.strip() or 0)
            status = int(fields["exit_status"].split()[0])
        except (ValueError, IndexError):
            continue
        task = fields.get("taskid", "undefined")
        out.append(Acct(fields["jobnumber"], int(task) if task.isdigit() else None,
                        fields.get("hostname", ""), failed, failed_text.strip(), status))
    return out


def acct_status(rec: Acct, cancelled: Optional[str] = None,
                deleted: bool = False) -> JobStatus:
    """A `JobStatus` from a job's accounting record (``failed`` 0, or 100 for a job a signal
    ended, is the job's own end). ``exit_status`` 128 + n is the
    signal n that killed the job (fiber's job script ``exec``-s python, so it is Python's
    own status); ``cancelled`` is ``"term"`` or ``"kill"`` when fiber deleted the job,
    ``deleted`` when someone else did (qstat showed it in state ``d``)."""
    if cancelled or deleted:
        return cancelled_status(cancelled)
    code = shell_code(rec.exit_status)
    # failed 100 ("assumedly after job"): the job ran and a signal ended it; nothing of
    # Grid Engine's own failed
    if rec.failed in (0, 100) and (rec.failed == 0 or code != 0):
        return exit_status(code)
    why = f"Grid Engine failed {rec.failed}" + (f": {rec.failed_text}" if rec.failed_text
                                                 else "")
    # failed 37: the qmaster enforced h_rt/h_cpu/h_vmem
    return JobStatus(JobState.FAILED, cause_code(code, signal.SIGKILL if rec.failed == 37
                                                 else None), why)


def cancelled_status(cancelled: Optional[str]) -> JobStatus:
    """The status of a job gone from qstat after a ``qdel`` (fiber's: ``term``/``kill``)."""
    return _cancelled_status(cancelled, *DELETED)


# -- names and context -------------------------------------------------------------------

def context_arg(program: str, name: str) -> str:
    """The ``qsub -ac`` value of a fiber job: its program and its name, percent-encoded
    (a context value ends at a comma)."""
    label = " ".join(name.split())[:200]
    return f"{PROGRAM_VAR}={program},{NAME_VAR}={urllib.parse.quote(label, safe='')}"


class Listed(NamedTuple):
    """A fiber job's context, as ``qstat -j -xml`` gives it."""

    job: str
    program: str
    name: str
    submitted: str  # ISO 8601, UTC


def parse_contexts(xml: str) -> Dict[str, Listed]:
    """``{job number: Listed}`` for the fiber jobs (those with a `PROGRAM_VAR` context)
    in ``qstat -j <ids> -xml`` output; other jobs are left out.

    Raises:
        ValueError: the text is not qstat's XML.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise ValueError(f"qstat -j printed no XML ({e})") from None
    out: Dict[str, Listed] = {}
    for job in root.findall("./djob_info/element"):
        number = _text(job, "JB_job_number")
        context = job.find("JB_context")
        if not number or context is None:
            continue
        values = {}
        for item in context:
            values[_text(item, "VA_variable")] = _text(item, "VA_value")
        if PROGRAM_VAR not in values:
            continue
        submitted = ""
        when = _text(job, "JB_submission_time")
        if when.isdigit():
            submitted = datetime.datetime.fromtimestamp(
                int(when), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        out[number] = Listed(number, values[PROGRAM_VAR],
                             urllib.parse.unquote(values.get(NAME_VAR, "")), submitted)
    return out


def smallest_host_cpus(qhost: str) -> Optional[int]:
    """The CPUs (``NCPU``) of the smallest execution host in ``qhost``'s table (the
    ``global`` line and hosts that report none are left out); None if none reports."""
    lines = qhost.splitlines()
    header = lines[0].split() if lines else []
    if "NCPU" not in header:
        return None
    column = header.index("NCPU")
    found = []
    for line in lines[1:]:
        fields = line.split()
        if len(fields) > column and fields[0] != "global" and fields[column].isdigit():
            found.append(int(fields[column]))
    return min(found) if found else None
