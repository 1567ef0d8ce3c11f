"""The settings of the ``slurm`` backend.

Each key is ``slurm_<key>`` in ``fiber.init``, ``FIBER_SLURM_<KEY>`` in the environment, and
``<key>`` in the ``[fiber.slurm]`` section of ``.fiberconfig`` (see ``fiber.config``); its
meaning is its ``#:`` comment, shown in the generated configuration reference."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional, Tuple

from ...config import Config, settings

__all__ = ["SlurmSettings", "own"]


@dataclasses.dataclass(frozen=True)
class SlurmSettings:
    """What the program's configuration says of the ``slurm`` backend."""

    #: ``FIBER_SLURM_*`` variables that are not settings (never warned about).
    variables: ClassVar[Tuple[str, ...]] = (
        "FIBER_SLURM_PROGRAM", "FIBER_SLURM_OWN_JOB",  # set for its jobs
        # read by its test cluster (scripts/slurm-cluster.sh)
        "FIBER_SLURM_CPUS", "FIBER_SLURM_DIR", "FIBER_SLURM_DRIVER_ADDR", "FIBER_SLURM_MEM",
        "FIBER_SLURM_MIN_JOB_AGE", "FIBER_SLURM_MSG_TIMEOUT", "FIBER_SLURM_NET",
        "FIBER_SLURM_SLURMD_TIMEOUT", "FIBER_SLURM_START_TIMEOUT"
    )

    #: Slurm partition of fiber's jobs (``sbatch --partition``); empty: the cluster's
    #: default partition.
    partition: str = ""
    #: Slurm account charged for fiber's jobs (``--account``); empty: the user's default.
    account: str = ""
    #: Slurm quality of service of fiber's jobs (``--qos``); empty: the default.
    qos: str = ""
    #: Time limit of each Slurm job or step (``--time``, Slurm syntax: ``30``,
    #: ``1:00:00``, ``2-00:00:00``); empty: the partition's default.
    time_limit: str = ""
    #: More ``sbatch`` arguments, split like a shell command line
    #: (``--constraint=v100 --exclusive``); not used for job steps.
    extra_args: str = ""
    #: Slurm job names are ``<prefix>-<process name>`` (``fiber-PoolWorker`` for a pool).
    job_name_prefix: str = "fiber"
    #: Directory of Slurm job logs (one ``<job name>-<job id>.out`` per job); empty:
    #: ``~/.fiber/slurm-logs``, in the home directory, which the nodes usually share. Must
    #: be writable from the nodes.
    output_dir: str = ""
    #: ``jobs``: every process is an ``sbatch`` job; ``steps``: every process is a job step
    #: (``srun``) of the allocation the program runs in; ``auto``: steps inside an
    #: allocation (``SLURM_JOB_ID`` set), jobs otherwise.
    mode: str = "auto"


def own(cfg: Optional[Config] = None) -> SlurmSettings:
    """The slurm backend's settings in ``cfg`` (or the config in force)."""
    return settings(SlurmSettings, "slurm", cfg)
