"""The CPUs of this host that fiber may use, and whether one is to spare right now.

A thread that waits for a message (a pool result, a pipe's or a queue's next item, in the
process that holds it or in another) polls for it a short while before it sleeps
(``spin_us``), since a sleeping thread takes 30-50 us to wake on a VM and then runs on
cold caches. Polling is only worth it on a CPU that
nothing else wants: on a busy host it would delay the very process whose message the
thread waits for. Pools know which of their workers hold tasks; other waits ask the
kernel how many tasks are runnable (``/proc/loadavg``, read with one ``pread``).
"""

from __future__ import annotations

import math
import os

__all__ = ["usable_cpus", "CPUS", "spare_cpu", "runnable"]


def usable_cpus() -> int:
    """CPUs this process may use: its CPU affinity, bounded by a cgroup v2 CPU quota (a
    container limited to 2 CPUs of a 64-core host)."""
    count = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return count


CPUS = usable_cpus()

_loadavg = (-1, -1)  # (pid, fd) of an open /proc/loadavg; fd -1: there is none


def spare_cpu() -> bool:
    """Whether the tasks runnable on this host right now, the caller included, leave a
    CPU of :data:`CPUS` for it to poll on (False where the kernel does not say)."""
    global _loadavg
    pid, fd = _loadavg
    if pid != os.getpid():  # first use, or a forked child (whose fds may have been closed)
        try:
            fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        _loadavg = (os.getpid(), fd)
    if fd < 0:
        return False
    try:
        return runnable(os.pread(fd, 128, 0)) <= CPUS
    except (OSError, ValueError, IndexError):
        return False


def runnable(loadavg: bytes) -> int:
    """The tasks runnable now, from ``/proc/loadavg`` (``0.52 0.58 0.59 2/345 6789``)."""
    return int(loadavg.split()[3].split(b"/")[0])
