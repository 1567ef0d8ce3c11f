"""Memory shared by the processes of one host: a memfd that each of them maps, so that a
``fiber.Array``'s ``get_obj()`` is a ctypes array on the very pages, as multiprocessing's
is. The design: docs/contributing/transport.md, "Memory shared on one host"."""

from __future__ import annotations

import mmap
import os
import weakref
from typing import NamedTuple, Optional, Tuple

from .._process_state import here

__all__ = ["HostMemory", "Locator", "attach", "AVAILABLE"]

AVAILABLE = hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")


def _host_key() -> Tuple[str, int]:
    """What processes of one host (kernel boot) and one PID namespace share."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        return boot, os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return "", 0


class Locator(NamedTuple):
    """Where another process of the same host finds a `HostMemory` (picklable)."""

    host: Tuple[str, int]
    pid: int
    fd: int
    inode: int
    size: int


class HostMemory:
    """``size`` bytes of shared memory made by this process: ``buffer`` is its mapping.

    The descriptor stays open (so that other processes can open it) until this object is
    collected; the mapping lives as long as whatever was made from it.
    """

    def __init__(self, size: int) -> None:
        size = max(1, size)  # an empty mapping cannot be made
        fd = os.memfd_create("fiber-array", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            self.buffer = mmap.mmap(fd, size)
            self.locator = Locator(_host_key(), here.pid, fd, os.fstat(fd).st_ino, size)
        except BaseException:
            os.close(fd)
            raise
        weakref.finalize(self, os.close, fd)


def attach(locator: Optional[Locator]) -> Optional[mmap.mmap]:
    """A mapping of the memory ``locator`` names, or None where it cannot be mapped
    (another host or PID namespace, the creator or its memory gone, no permission)."""
    if locator is None or not AVAILABLE or locator.host != _host_key() or not locator.host[0]:
        return None
    if locator.pid == here.pid:
        return None  # the creator has its own mapping
    try:
        fd = os.open(f"/proc/{locator.pid}/fd/{locator.fd}", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_ino != locator.inode or st.st_size < locator.size:
            return None
        return mmap.mmap(fd, locator.size)
    except OSError:
        return None
    finally:
        os.close(fd)
