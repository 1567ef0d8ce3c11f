"""The ``fiber`` command on Slurm: the output of a program ``fiber run`` started, and
``fiber ps``, ``logs`` and ``stop``: the batch jobs of any fiber program of this user,
whichever process submitted them.

Slurm keeps no labels, so every fiber job carries its program's id in its comment
(``sbatch --comment="fiber <program> <name>"``, see
`job_comment`), and the processes of a program
inherit the id. One ``squeue`` lists them; a job's output is the ``StdOut`` file
``scontrol`` names (or, once Slurm has forgotten the job, its file in
``slurm_output_dir``); stopping is ``scancel``. Job steps (``slurm_mode=steps``) live
inside their allocation and are not listed: stopping the allocation's job stops them.
"""

from __future__ import annotations

import glob
import os
import re
from typing import List, Optional

from ...errors import BackendError
from .._base import JobInfo
from .._batch import BatchCommands, by_submission, last_lines, log_dir, read_output
from ._settings import own
from ._status import LIST_FORMAT, parse_listing, stdout_path

__all__ = ["output_dir", "find_jobs", "read_logs", "last_lines", "ENDING"]


#: Slurm job states (lower case, as listed) in which there is nothing left to stop.
ENDING = frozenset({"completing", "completed", "cancelled", "failed", "timeout", "node_fail",
                    "boot_fail", "preempted", "out_of_memory", "deadline", "revoked",
                    "special_exit"})


def output_dir() -> str:
    """The directory of job logs, ``slurm_output_dir``; by default
    ``~/.fiber/slurm-logs`` (`log_dir`)."""
    return log_dir(own().output_dir, "slurm-logs", "Slurm", "slurm_output_dir")


def find_jobs(backend: BatchCommands, program: str = "") -> List[JobInfo]:
    """This user's fiber jobs that Slurm still lists (only ``program``'s if given),
    oldest first; a job's state is Slurm's word for it (``running``, ``cancelled``...)."""
    argv = ["squeue", "--noheader", "--array", "--states=all", f"--user={os.getuid()}",
            f"--Format={LIST_FORMAT}"]
    cp = backend.run_command(argv, timeout=backend.query_timeout, what="squeue")
    return by_submission(JobInfo(r.job_id, r.program, r.name, r.state, r.submitted,
                                 ended=r.state in ENDING and r.state != "completing")
                         for r in parse_listing(cp.stdout) if not program or r.program == program)


def read_logs(backend: BatchCommands, job_id: str, tail: Optional[int] = None) -> str:
    """The output file of a batch job (its last ``tail`` lines)."""
    if not re.fullmatch(r"\d+(_\d+)?", job_id):
        raise BackendError(f"{job_id!r} is not a Slurm job id (1234, or 1234_5 for a task "
                           "of a job array)")
    cp = backend.run_command(["scontrol", "show", "job", job_id],
                             timeout=backend.query_timeout, what="scontrol", check=False)
    path = stdout_path(cp.stdout) if cp.returncode == 0 else ""
    if not path or "%" in path:  # forgotten by Slurm (MinJobAge), or a pattern unexpanded
        pattern = os.path.join(glob.escape(output_dir()), f"*-{job_id}.out")
        found = glob.glob(pattern)
        path = found[0] if len(found) == 1 else ""
    if not path:
        raise BackendError(f"no output of Slurm job {job_id}: Slurm does not list it and "
                           f"slurm_output_dir has no *-{job_id}.out")
    return read_output(path, f"Slurm job {job_id}", tail,
                       "is slurm_output_dir shared with its node?")

