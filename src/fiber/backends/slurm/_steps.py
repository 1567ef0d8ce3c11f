"""Job steps (``slurm_mode=steps``): inside an allocation, every process is one
``srun --exact -n1`` step, started at once on the allocation's free CPUs.

A step is an ``srun`` child of the master; its Slurm step id, and the node it runs on,
are learned from ``squeue --steps`` (one call for all the steps of the allocation) once
Slurm lists it. Its exit status is the ``srun``'s. Cancel is ``scancel`` of the step ids;
a step still waiting for CPUs has none yet, and its ``srun`` is told to give up instead.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

from ...errors import SubmitError
from .._base import JobHandle, JobStatus
from .._batch import BatchCommands
from ._status import step_status

__all__ = ["Step", "step_rows", "query_steps", "cancel_steps"]


@dataclasses.dataclass
class Step:
    """A job step this process started: its ``srun``, and its Slurm id once listed."""

    handle: JobHandle
    name: str
    popen: subprocess.Popen[bytes]
    step_id: str = ""
    cancelled: Optional[str] = None


def step_rows(backend: BatchCommands) -> Dict[str, Tuple[str, str]]:
    """``{step name: (step id, nodes)}`` of this allocation's steps, one squeue call."""
    alloc = os.environ.get("SLURM_JOB_ID", "")
    argv = ["squeue", "--noheader", "--steps", f"--jobs={alloc}", "--format=%i|%j|%N"]
    cp = backend.run_command(argv, timeout=backend.query_timeout, what="squeue --steps",
                             check=False)
    rows = {}
    for line in cp.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3:
            rows[parts[1]] = (parts[0], parts[2])
    return rows


def _learn_ids(backend: BatchCommands, steps: List[Step]) -> None:
    """Set the Slurm step id and node of each of ``steps`` that squeue lists (one call;
    none if it cannot run)."""
    try:
        rows = step_rows(backend)
    except SubmitError:
        rows = {}
    for s in steps:
        if s.name in rows:
            s.step_id, s.handle.host = rows[s.name]


def query_steps(backend: BatchCommands, steps: List[Step],
                handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
    """The status of ``steps`` (of ``handles``, in order); sets their hosts once known."""
    out: Dict[str, JobStatus] = {}
    if any(s.popen.poll() is None and not s.handle.host for s in steps):
        _learn_ids(backend, steps)
    for s, h in zip(steps, handles):
        h.host = s.handle.host
        out[h.job_id] = step_status(s.popen.poll(), s.cancelled)
    return out


def cancel_steps(backend: BatchCommands, steps: List[Step], how: str) -> None:
    """Cancel ``steps`` (``how``: "term" or "kill")."""
    live = [s for s in steps if s.popen.poll() is None]
    for s in live:
        if s.cancelled != "kill":
            s.cancelled = how
    if not live:
        return
    if any(not s.step_id for s in live):
        _learn_ids(backend, live)
    ids = [s.step_id for s in live if s.step_id]
    if ids:
        backend.cancel_ids(ids, how == "kill")
    for s in live:
        if not s.step_id:  # still waiting for CPUs: srun abandons the step
            try:
                s.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
