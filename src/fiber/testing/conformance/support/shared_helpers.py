"""Targets for the shared-data tests (test_shared.py); importable by the children."""

from __future__ import annotations

import os
import zlib
from typing import TYPE_CHECKING, Optional, Tuple

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from _typeshed import ReadableBuffer

    from fiber.connection import Connection
    from fiber.queues import Queue
    from fiber.synchronize import Event

    #: What `report` says of a table.
    Report = Tuple[int, str, int, int, bool]

_table: Optional[npt.NDArray[np.float64]] = None


def crc(buf: ReadableBuffer) -> int:
    return zlib.crc32(memoryview(buf).cast("B"))


def host_of_this_process() -> str:
    """The kernel boot and network namespace of this process: what a "host" is to fiber."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f"{f.read().strip()}/{os.stat('/proc/self/ns/net').st_ino}"


def report(table: npt.NDArray[np.float64]) -> Report:
    """(pid, host, address of the data, crc of every byte, writable)."""
    return (os.getpid(), host_of_this_process(), table.__array_interface__["data"][0],
            crc(table), bool(table.flags.writeable))


def keep(table: npt.NDArray[np.float64], q: Queue[Report]) -> None:
    """A pool initializer: keep the table for the tasks, report what arrived."""
    global _table
    _table = table
    q.put(report(table))


def send_crc(table: npt.NDArray[np.float64], conn: Connection) -> None:
    """A pool initializer: send the crc of the table through a pipe end."""
    conn.send(crc(table))


def scribble(_: object) -> Tuple[int, int]:
    """A task: the crc of the table as this worker found it, then after overwriting it."""
    assert _table is not None
    before = crc(_table)
    _table[:] = 7.0
    return before, crc(_table)


def report_shared(table: npt.NDArray[np.float64], q: Queue[Report],
                  done: Optional[Event] = None) -> None:
    """A process's target: ``table`` was a fiber.shared handle in the parent. With
    ``done``, it stays (holding its host's copy, if it fetched one) until ``done`` is set."""
    q.put(report(table))
    if done is not None:
        done.wait(120)


def scribble_and_wait(table: npt.NDArray[np.float64], q: Queue[Tuple[int, int, str]],
                      done: Event) -> None:
    """Overwrite the shared table, report, and keep it mapped until ``done`` is set."""
    before = crc(table)
    table[:] = 7.0
    q.put((before, crc(table), host_of_this_process()))
    done.wait(120)
