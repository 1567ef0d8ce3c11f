"""The ``slurm`` backend: every fiber process is a Slurm job, or a job step.

- `_backend`: `SlurmBackend` (submit, watch, cancel; job arrays and steps).
- `_jobs`: the jobs of a program, found again by their comment; their output.
- `_status`: ``squeue``/``sacct`` listings parsed into job states.
"""

from ..._exports import publish
from ._backend import OWN_JOB_ENV, PROGRAM_ENV, SlurmBackend
from ._status import (
    controller_address,
    parse_exit_pair,
    parse_raw_exit,
    parse_sacct,
    parse_squeue,
    status_of,
)

__all__ = ["SlurmBackend", "parse_squeue", "parse_raw_exit", "parse_exit_pair", "parse_sacct",
           "status_of", "controller_address", "OWN_JOB_ENV", "PROGRAM_ENV"]

publish(__name__, SlurmBackend)
