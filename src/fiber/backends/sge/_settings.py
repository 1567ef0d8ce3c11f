"""The settings of the ``sge`` backend.

Each key is ``sge_<key>`` in ``fiber.init``, ``FIBER_SGE_<KEY>`` in the environment, and
``<key>`` in the ``[fiber.sge]`` section of ``.fiberconfig`` (see ``fiber.config``); its
meaning is its ``#:`` comment, shown in the generated configuration reference. Values
that ``qsub`` would misread are refused when the configuration is resolved, naming the key.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import ClassVar, Optional, Tuple

from ...config import Config, settings

__all__ = ["SgeSettings", "own", "time_limit_seconds"]

_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_RESOURCE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TIME = re.compile(r"^(\d+:){0,2}\d+$")


def time_limit_seconds(text: str) -> float:
    """``h_rt`` in seconds: ``S``, ``M:S`` or ``H:M:S`` (a format `_TIME` accepts)."""
    total = 0
    for part in text.strip().split(":"):
        total = total * 60 + int(part)
    return float(total)


@dataclasses.dataclass(frozen=True)
class SgeSettings:
    """What the program's configuration says of the ``sge`` backend."""

    #: ``FIBER_SGE_*`` variables that are not settings (never warned about).
    variables: ClassVar[Tuple[str, ...]] = (
        "FIBER_SGE_PROGRAM",  # set for its jobs
        # read by its test cluster (scripts/sge-cluster.sh)
        "FIBER_SGE_DIR", "FIBER_SGE_NET", "FIBER_SGE_SLOTS", "FIBER_SGE_WIDE_SLOTS",
        "FIBER_SGE_NOTIFY", "FIBER_SGE_MAX_UNHEARD", "FIBER_SGE_QMASTER_PORT",
        "FIBER_SGE_EXECD_PORT", "FIBER_SGE_START_TIMEOUT", "FIBER_SGE_DRIVER_ADDR",
    )

    #: Cluster queue of fiber's jobs (``qsub -q``; ``all.q``, ``gpu.q@node7``); empty: any
    #: queue the scheduler picks.
    queue: str = ""
    #: Project of fiber's jobs (``qsub -P``); empty: the user's default project.
    project: str = ""
    #: Parallel environment of a job that asks for more than one CPU (``qsub -pe <pe> N``;
    #: it should place all N slots on one host: allocation rule ``$pe_slots``); empty: a
    #: job that asks for more than one CPU is refused with an error saying so.
    pe: str = ""
    #: Resource that a job's memory is asked with (``qsub -l <resource>=<MB per slot>M``:
    #: ``h_vmem``, a hard limit of the job's virtual memory; ``mem_free``,
    #: ``virtual_free``...); Grid Engine counts it per slot, so fiber divides a job's memory
    #: by its slots. Empty: memory is not asked for.
    memory_resource: str = "h_vmem"
    #: Resource that a job's GPUs are asked with (``qsub -l <resource>=N``), a consumable
    #: the cluster's administrator defines; empty: a job that asks for GPUs is refused.
    gpu_resource: str = "gpu"
    #: Wall-clock limit of each job (``qsub -l h_rt=``, seconds or ``[[h:]m:]s``:
    #: ``3600``, ``1:00:00``); empty: the queue's limit. With a limit, jobs are also
    #: submitted with ``-notify`` (SIGUSR2 at the limit, SIGKILL the queue's ``notify``
    #: time later: a pool worker retires), and a pool renews its workers before it.
    time_limit: str = ""
    #: Pass this process's environment to the jobs (``qsub -V``), as ``sbatch`` does by
    #: default; False: only fiber's own variables and those Grid Engine sets.
    export_env: bool = True
    #: More ``qsub`` arguments, split like a shell command line (``-l arch=lx-amd64 -R y``).
    extra_args: str = ""
    #: Job names are ``<prefix>-<process name>`` (``fiber-PoolWorker`` for a pool).
    job_name_prefix: str = "fiber"
    #: Directory of the job logs (``qsub -o <dir>/<program> -j y``: one ``<job name>.o<job
    #: id>[.<task id>]`` per job, in a directory per program); empty: ``~/.fiber/sge-logs``,
    #: in the home directory, which the nodes usually share. Must be writable from the
    #: nodes, at the same path (a shared filesystem), for ``fiber logs``.
    output_dir: str = ""

    def __post_init__(self) -> None:
        for key in ("queue", "project", "pe"):
            value = getattr(self, key)
            if value and not re.fullmatch(r"[^\s,]+", value):
                raise ValueError(f"{key} must be one name without spaces or commas, got "
                                 f"{value!r}")
        for key in ("memory_resource", "gpu_resource"):
            value = getattr(self, key)
            if value and not _RESOURCE.match(value):
                raise ValueError(f"{key} must be the name of a Grid Engine resource "
                                 f"(h_vmem, gpu...), got {value!r}")
        if self.time_limit and not _TIME.match(self.time_limit.strip()):
            raise ValueError(f"time_limit must be seconds or [[hours:]minutes:]seconds "
                             f"(3600, 1:00:00), got {self.time_limit!r}")
        try:
            shlex.split(self.extra_args)
        except ValueError as e:
            raise ValueError(f"extra_args cannot be split like a command line "
                             f"({self.extra_args!r}: {e})") from None
        if not _WORD.match(self.job_name_prefix):
            raise ValueError("job_name_prefix must start with a letter and hold only "
                             f"letters, digits and ._- (a job name), got "
                             f"{self.job_name_prefix!r}")
        if self.output_dir and (":" in self.output_dir or "," in self.output_dir):
            raise ValueError("output_dir cannot hold ':' or ',' (qsub -o reads them as "
                             f"host and list separators), got {self.output_dir!r}")


def own(cfg: Optional[Config] = None) -> SgeSettings:
    """The sge backend's settings in ``cfg`` (or the config in force)."""
    return settings(SgeSettings, "sge", cfg)
