"""The ``fiber`` command on Grid Engine: the output of a program ``fiber run`` started, and
``fiber ps``, ``logs`` and ``stop``: the jobs of any fiber program of this user, whichever
process submitted them.

Every fiber job carries its program's id and its name in its context (``qsub -ac
fiber_program=<id>,fiber_name=<name>``, see `context_arg`); the processes of a program
inherit the id. ``qstat -u <user> -xml`` lists this user's jobs and ``qstat -j <ids> -xml``
gives their context (two calls); a job's output is its file in ``sge_output_dir`` (the
program's directory in it); stopping is ``qdel``. Grid Engine forgets a job as soon as it
has ended (``qacct`` keeps its record, without its context): ended jobs are not listed.
"""

from __future__ import annotations

import getpass
import glob
import os
from typing import List, Optional, Sequence

from ...errors import BackendError, SubmitError
from .._base import JobInfo
from .._batch import BatchCommands, by_submission, last_lines, log_dir, read_output
from ._settings import own
from ._status import Listed, Row, parse_contexts, parse_qstat, split_id

__all__ = ["output_dir", "program_dir", "find_jobs", "read_logs", "last_lines", "user",
           "state_word", "qstat_rows"]


def user() -> str:
    """The user whose jobs fiber lists (``qstat -u``)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid
        return str(os.getuid())


def output_dir() -> str:
    """The directory of job logs, ``sge_output_dir``; by default ``~/.fiber/sge-logs``
    (`log_dir`)."""
    return log_dir(own().output_dir, "sge-logs", "Grid Engine", "sge_output_dir")


def program_dir(program: str) -> str:
    """The directory of a program's job logs: ``<sge_output_dir>/<program>`` (created
    when missing). A program's jobs write to a directory of its own: job ids start again
    when a cluster's state is reset, and Grid Engine appends to an output file that
    exists, which would otherwise be an earlier job's of the same name and id."""
    path = os.path.join(output_dir(), program)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as e:
        raise SubmitError(f"cannot create the Grid Engine log directory {path!r}: {e}"
                          ) from None
    return path


_WORDS = (("E", "error"), ("d", "deleting"), ("h", "held"), ("s", "suspended"),
          ("S", "suspended"), ("T", "suspended"), ("r", "running"), ("t", "starting"),
          ("q", "pending"), ("w", "pending"))


def state_word(letters: str) -> str:
    """Grid Engine's state letters as one word (``qw`` pending, ``dr`` deleting...)."""
    for letter, word in _WORDS:
        if letter in letters:
            return word
    return letters or "unknown"


def qstat_rows(backend: BatchCommands, flags: Sequence[str] = ()) -> List[Row]:
    """This user's jobs as ``qstat [flags] -u <user> -xml`` lists them.

    Raises:
        SubmitError: qstat failed, or printed no XML.
    """
    argv = ["qstat", *flags, "-u", user(), "-xml"]
    cp = backend.run_command(argv, timeout=backend.query_timeout, what="qstat")
    try:
        return parse_qstat(cp.stdout)
    except ValueError as e:
        raise SubmitError(f"qstat: {e}", command=argv, returncode=cp.returncode,
                          stdout=cp.stdout, stderr=cp.stderr) from None


def find_jobs(backend: BatchCommands, program: str = "") -> List[JobInfo]:
    """This user's fiber jobs that Grid Engine lists (only ``program``'s if given), oldest
    first; a job's state is Grid Engine's, as a word (``pending``, ``running``...)."""
    rows = qstat_rows(backend)
    numbers = sorted({r.job for r in rows}, key=int)
    if not numbers:
        return []
    argv = ["qstat", "-j", ",".join(numbers), "-xml"]
    cp = backend.run_command(argv, timeout=backend.query_timeout, what="qstat -j",
                             check=False)
    try:  # (a job that ended between the two calls is left out)
        contexts = parse_contexts(cp.stdout)
    except ValueError:
        if cp.returncode == 0:
            raise SubmitError("qstat -j printed no XML", command=argv, stdout=cp.stdout,
                              stderr=cp.stderr) from None
        contexts = {}
    out: List[JobInfo] = []
    for r in rows:
        ctx = contexts.get(r.job)
        if ctx is None or (program and ctx.program != program):
            continue
        for job_id in ([f"{r.job}.{t}" for t in r.tasks] if r.tasks else [r.job]):
            out.append(JobInfo(job_id, ctx.program, ctx.name, state_word(r.state),
                               ctx.submitted, ended="E" in r.state))
    return by_submission(out)


def read_logs(backend: BatchCommands, job_id: str, tail: Optional[int] = None) -> str:
    """The output file of a job (its last ``tail`` lines):
    ``<sge_output_dir>/<program>/<name>.o<job>[.<task>]``. A job Grid Engine still lists
    is looked up in its own program's directory (empty until the job has written): job ids
    start again when a cluster's state is reset, and an earlier job's file of the same id
    is no answer (it would be read before the live job has made its own).
    Of a job Grid Engine has forgotten, the file of that id written last."""
    try:
        job, task = split_id(job_id)
    except ValueError as e:
        raise BackendError(str(e)) from None
    suffix = f".o{job}" + (f".{task}" if task is not None else "")
    listed = _context(backend, job)
    folder = glob.escape(listed.program) if listed else "*"
    found = glob.glob(os.path.join(glob.escape(output_dir()), folder, f"*{suffix}"))
    if listed and not found:
        return ""
    if not found:
        raise BackendError(f"no output of Grid Engine job {job_id}: sge_output_dir "
                           f"({output_dir()}) has no */*{suffix}")
    return read_output(max(found, key=_mtime), f"Grid Engine job {job_id}", tail)


def _context(backend: BatchCommands, job: str) -> Optional[Listed]:
    """The fiber context of job number ``job`` if Grid Engine lists it, else None."""
    cp = backend.run_command(["qstat", "-j", job, "-xml"], timeout=backend.query_timeout,
                             what="qstat -j", check=False)
    try:
        return parse_contexts(cp.stdout).get(job) if cp.returncode == 0 else None
    except ValueError:
        return None


def _mtime(path: str) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0

