"""The CPUs of this host that fiber may use, whether one is to spare right now, and
polling while one is.

A thread that waits for a message (a pool result or task, a pipe's or a queue's next
item, in the process that holds it or in another) polls for it a short while before it
sleeps (``spin_us``; a pool's master longer while quick tasks run), since a sleeping
thread takes 30-50 us to wake on a VM and then runs on cold caches, and an idle virtual
CPU must itself be woken by the next message's sender (~15 us in its ``send``). Polling
is only worth it on a CPU that nothing else wants: on a busy host it would delay the very
process whose message the thread waits for. So `poll` asks the kernel how many
tasks are runnable (``/proc/loadavg``, read with one ``pread``) as it goes.
"""

from __future__ import annotations

import math
import os
import time
from typing import Callable, TypeVar

from .._process_state import here

__all__ = ["usable_cpus", "CPUS", "spare_cpu", "runnable", "poll", "polled_seconds",
           "open_load", "CONTENDED_S"]

T = TypeVar("T")

#: A poll ends once no CPU has been spare for this long: the host is busy, not just a
#: few tasks waking at once (as the workers of a pool do when a round starts or ends).
CONTENDED_S = 300e-6
#: A poll does not start while more tasks than this many per CPU are runnable: hundreds
#: of workers starting or working at once, where yielding the CPU to each other in turn
#: would cost them all (a Pool(512) started 1.3x slower, its workers used 2.6x the CPU).
OVERLOADED_PER_CPU = 2


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

# The descriptor of /proc/loadavg and the seconds spent polling: in ``here.transport``
# (``loadavg``, ``cpus_polled``).


@here.after_fork_in_child
def _forget_in_child() -> None:
    """A forked child opens its own descriptor on first use: the parent's, inherited, may
    be closed by the child (the local backend's fork server closes what it does not
    pass on), and its number then taken by another file."""
    here.transport.loadavg = None


def polled_seconds() -> float:
    """The wall time this process's threads have spent polling so far (from a first
    attempt that found nothing to the end of the poll): what polling costs it, at most
    that much CPU. Kept as a sum, since the process started."""
    return here.transport.cpus_polled[0]


def spare_cpu() -> bool:
    """Whether the tasks runnable on this host right now, the caller included, leave a
    CPU of `CPUS` for it to poll on (False where the kernel does not say)."""
    return _runnable_now() <= CPUS


def open_load() -> int:
    """This process's descriptor of ``/proc/loadavg`` (-1 where there is none), opened on
    first use. A job opens it as it starts (see ``fiber.process._bootstrap``), so that its
    descriptors do not depend on whether it has polled yet, as a ``multiprocessing``
    child's do not."""
    fd = here.transport.loadavg
    if fd is None:
        try:
            fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            fd = -1
        here.transport.loadavg = fd
    return fd


def _runnable_now() -> int:
    """The tasks runnable on this host now; a huge number where the kernel does not say."""
    fd = here.transport.loadavg
    if fd is None:
        fd = open_load()
    if fd < 0:
        return 1 << 30
    try:
        return runnable(os.pread(fd, 128, 0))
    except (OSError, ValueError, IndexError):
        return 1 << 30


def runnable(loadavg: bytes) -> int:
    """The tasks runnable now, from ``/proc/loadavg`` (``0.52 0.58 0.59 2/345 6789``)."""
    return int(loadavg.split()[3].split(b"/")[0])


def poll(attempt: Callable[[], T], seconds: float) -> T:
    """Call ``attempt()`` until it gives something true, for up to ``seconds``, while
    this host has a CPU to spare; returns what the last attempt gave.

    While the runnable tasks leave no CPU to spare, the CPU is yielded between attempts
    (to the tasks that want it), and once that has lasted `CONTENDED_S` the poll
    ends early: the caller then sleeps, as it would have without polling. On a host with
    more than `OVERLOADED_PER_CPU` runnable tasks per CPU it makes one attempt only.
    """
    start = time.monotonic()
    got = attempt()
    if got or (not spare_cpu() and _runnable_now() > OVERLOADED_PER_CPU * CPUS):
        return got
    try:
        return _poll_on(attempt, start + seconds)
    finally:
        here.transport.cpus_polled[0] += time.monotonic() - start


def _poll_on(attempt: Callable[[], T], end: float) -> T:
    contended = 0.0  # since when no CPU has been spare (0: one is)
    while True:
        now = time.monotonic()
        if now >= end:
            return attempt()
        if spare_cpu():
            contended = 0.0
        elif not contended:
            contended = now
        elif now - contended > CONTENDED_S:
            return attempt()
        # The CPU is offered between attempts: to the tasks that want it while none is
        # spare; while one is, the system call alone paces the attempts, whose reads
        # otherwise contend with the peer's writes on the socket (without it, a queue's
        # round trip measured ~3 us slower: 30 -> 33 us, benchmarks/compare.py --bench
        # queue, 11 runs a version alternating).
        os.sched_yield()
        got = attempt()
        if got:
            return got
