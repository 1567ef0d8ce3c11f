"""GPUs on a workstation: the local backend gives each job that asks for ``gpu=n`` its own
``n`` of this host's GPUs, as ``CUDA_VISIBLE_DEVICES``.

The GPUs are those this process may use, as the host (or a scheduler that placed this
program, Slurm's ``--gpus``) reports them: ``CUDA_VISIBLE_DEVICES`` when it is set (ids or
UUIDs, comma-separated; empty or ``-1``: none), else ``nvidia-smi -L``, else the entries
of ``/proc/driver/nvidia/gpus``. A job holds its GPUs until it ends; a request that the
host can never meet (more than it has) is refused at once, and one that must wait for
other jobs' GPUs waits up to ``WAIT_S`` for them to end, then is refused, with the reason.
A job that asks for none keeps the GPUs this process sees (as a subprocess would).
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
import time
from typing import Callable, Dict, List, Optional

from ...errors import SubmitError

__all__ = ["GPU_ENV", "host_gpus", "GpuPool"]

GPU_ENV = "CUDA_VISIBLE_DEVICES"
#: Seconds a job waits for GPUs that other jobs hold (a pool replacing a lost worker
#: waits for the lost one's GPU).
WAIT_S = 10.0


def host_gpus(environ: Optional[Dict[str, str]] = None) -> List[str]:
    """The GPUs this process may use (see the module's docstring), as ids for
    ``CUDA_VISIBLE_DEVICES``."""
    env = os.environ if environ is None else environ
    listed = env.get(GPU_ENV)
    if listed is not None:
        gpus = [g.strip() for g in listed.split(",") if g.strip()]
        return [] if gpus[:1] == ["-1"] else gpus
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return [m.group(1) for m in re.finditer(r"^GPU (\d+):", out.stdout, re.MULTILINE)]
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


class GpuPool:
    """The host's GPUs and the jobs that hold them."""

    def __init__(self, gpus: List[str], source: str) -> None:
        self.gpus = gpus
        self._source = source  # where the list came from, for error messages
        self._held: Dict[str, List[str]] = {}
        self._cond = threading.Condition()

    def take(self, count: int, job_id: str, ended: Callable[[str], bool]) -> List[str]:
        """``count`` GPUs for ``job_id``; those of jobs that have ended (``ended(id)``)
        are taken back first.

        Raises:
            SubmitError: the host has fewer GPUs, or they stay held by other jobs.
        """
        self.check(count, f"a job asks for gpu={count}")
        deadline = time.monotonic() + WAIT_S
        with self._cond:
            while True:
                for other in [j for j in self._held if ended(j)]:
                    del self._held[other]
                busy = {g for gs in self._held.values() for g in gs}
                free = [g for g in self.gpus if g not in busy]
                if len(free) >= count:
                    self._held[job_id] = free[:count]
                    return free[:count]
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SubmitError(
                        f"a job asks for gpu={count}; {len(free)} of this host's "
                        f"{len(self.gpus)} GPUs are free (the others are held by jobs "
                        f"{', '.join(sorted(self._held))}) ({self._source})")
                self._cond.wait(min(left, 0.1))

    def check(self, count: int, what: str) -> None:
        """Refuse ``count`` GPUs if the host has fewer (``what``: who asks, for the error).

        Raises:
            SubmitError: it has.
        """
        if count > len(self.gpus):
            raise SubmitError(f"{what}; this host has {len(self.gpus)} "
                              f"GPU{'' if len(self.gpus) == 1 else 's'} ({self._source})")

    def release(self, job_id: str) -> None:
        with self._cond:
            if self._held.pop(job_id, None) is not None:
                self._cond.notify_all()
