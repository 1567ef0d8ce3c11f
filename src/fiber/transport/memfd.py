"""Large frames between processes of one host as sealed memfds, passed on without a copy:
a sealed memfd never changes, so every process that maps it sees the same bytes. The
design: docs/contributing/transport.md, "Large frames as memfds"."""

from __future__ import annotations

import array
import ctypes
import errno
import fcntl
import mmap
import os
import time
import weakref
from typing import TYPE_CHECKING, Optional, Union

from .._process_state import here

if TYPE_CHECKING:
    from .serialization import Frame

__all__ = ["AVAILABLE", "to_memfd", "receive", "sealed", "add_seals"]

_SEALS = (getattr(fcntl, "F_SEAL_SHRINK", 0) | getattr(fcntl, "F_SEAL_GROW", 0)
          | getattr(fcntl, "F_SEAL_WRITE", 0))
AVAILABLE = hasattr(os, "memfd_create") and hasattr(fcntl, "F_ADD_SEALS") and _SEALS != 0

#: Received memfds remembered for sending on (each keeps a descriptor open).
_MAX_KEPT = 64
#: Tries of a new memfd's seals: the kernel refuses F_SEAL_WRITE (EBUSY) while a page of
#: it has a reference besides the page cache's, which a loaded host can leave for a moment
#: after the write (its LRU batching, compaction; a Slurm job in CI met it). It waits
#: 1 ms, then twice as long each time: about 0.5 s in all.
_SEAL_TRIES = 10
_PAGE = mmap.PAGESIZE
# The mappings kept and sealed, and their (reentrant) lock: in ``here.transport``
# (``memfd_kept``, ``memfd_sealed``, ``memfd_lock``).


def to_memfd(frame: Frame, size: int) -> int:
    """A sealed memfd holding ``frame``: the one it came in, when it is an unmodified
    received mapping or a `sealed` one, else a new copy. The caller closes the
    descriptor."""
    fd = _sealed_memfd(frame)
    if fd is None:
        fd = _kept_memfd(frame, size)
    if fd is not None:
        return fd
    return _new_memfd(frame, size)


def _new_memfd(frame: Frame, size: int) -> int:
    fd = os.memfd_create(
        "fiber-frame", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(frame).cast("B")
        written = 0
        while written < size:
            written += os.write(fd, view[written:])
        add_seals(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def add_seals(fd: int) -> None:
    """Seal memfd ``fd`` for good, trying again while the kernel says it is busy (see
    `_SEAL_TRIES`).

    Raises:
        OSError: the seals were refused (EBUSY after the last try, or another error).
    """
    for i in range(_SEAL_TRIES):
        try:
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS | fcntl.F_SEAL_SEAL)
            return
        except OSError as e:
            if e.errno != errno.EBUSY or i == _SEAL_TRIES - 1:
                raise
        time.sleep(0.001 * 2 ** i)


def sealed(frame: Frame) -> mmap.mmap:
    """A read-only mapping of a new sealed memfd holding a copy of ``frame`` (not empty).

    Sent to a process of this host, the mapping goes as that memfd (a descriptor, no
    copy), however often; the memfd is closed when the mapping is freed.

    Raises:
        ValueError: ``frame`` is empty.
        OSError: no memory for the copy.
    """
    size = memoryview(frame).nbytes
    if size == 0:
        raise ValueError("cannot seal an empty frame")
    fd = _new_memfd(frame, size)
    try:
        mapping = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)
    except BaseException:
        os.close(fd)
        raise
    key = id(mapping)
    state = here.transport
    with state.memfd_lock:
        state.memfd_sealed[key] = (fd, weakref.ref(mapping, lambda _: _unseal(key, fd)))
    return mapping


def _unseal(key: int, fd: int) -> None:
    state = here.transport
    with state.memfd_lock:
        entry = state.memfd_sealed.get(key)
        if entry is not None and entry[0] == fd:
            del state.memfd_sealed[key]
    os.close(fd)


def _sealed_memfd(frame: Frame) -> Optional[int]:
    """A new descriptor of the memfd of a `sealed` mapping (None for others)."""
    if type(frame) is not mmap.mmap:
        return None
    state = here.transport
    with state.memfd_lock:
        entry = state.memfd_sealed.get(id(frame))
        if entry is None or entry[1]() is not frame:
            return None
        return os.dup(entry[0])


def receive(fd: int, size: int) -> Union[mmap.mmap, bytearray]:
    """The frame in a received memfd (takes the descriptor: keeps or closes it).

    Raises:
        ValueError: the memfd is shorter than ``size``.
    """
    keep = False
    try:
        if os.fstat(fd).st_size < size:
            raise ValueError("shared-memory frame shorter than announced")
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS:
            return _read_all(fd, size)
        try:
            mapping = mmap.mmap(fd, size, flags=mmap.MAP_PRIVATE,
                                prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except PermissionError:  # kernels that refuse a writable map of a sealed memfd
            return _read_all(fd, size)
        keep = _keep(mapping, fd, size)
        return mapping
    finally:
        if not keep:
            os.close(fd)


def _read_all(fd: int, size: int) -> bytearray:
    """The content of a memfd that may still change (read, so no SIGBUS is possible)."""
    buf = bytearray(size)
    view = memoryview(buf)
    filled = 0
    while filled < size:
        n = os.preadv(fd, [view[filled:]], filled)
        if n <= 0:
            raise ValueError("shared-memory frame shorter than announced")
        filled += n
    return buf


def _address(buf: Frame) -> Optional[int]:
    """Where a writable buffer starts in memory (None for a read-only one)."""
    try:
        probe = ctypes.c_char.from_buffer(buf)
    except (TypeError, ValueError):
        return None
    address = ctypes.addressof(probe)
    del probe  # releases the buffer export at once
    return address


def _keep(mapping: mmap.mmap, fd: int, size: int) -> bool:
    address = _address(mapping)
    state = here.transport
    with state.memfd_lock:
        if address is None or len(state.memfd_kept) >= _MAX_KEPT:
            return False
        state.memfd_kept[address] = (size, fd,
                                     weakref.ref(mapping, lambda _: _forget(address, fd)))
    return True


def _forget(address: int, fd: int) -> None:
    """A kept mapping was freed: its descriptor goes too."""
    state = here.transport
    with state.memfd_lock:
        entry = state.memfd_kept.get(address)
        if entry is not None and entry[1] == fd:
            del state.memfd_kept[address]
    os.close(fd)


def _kept_memfd(frame: Frame, size: int) -> Optional[int]:
    """A new descriptor of the memfd ``frame`` was received in, if ``frame`` is the
    whole of that mapping and none of its pages was written since."""
    address = _address(frame)
    if address is None:
        return None
    state = here.transport
    with state.memfd_lock:
        entry = state.memfd_kept.get(address)
        if entry is None or entry[0] != size or entry[2]() is None:
            return None
        if not _unwritten(address, size):
            return None
        return os.dup(entry[1])


def _unwritten(address: int, size: int) -> bool:
    """Whether no page of a private file mapping was copied on write (or swapped out,
    which only anonymous pages are): bits 63 present, 62 swapped, 61 file page."""
    first, count = address // _PAGE, (size + _PAGE - 1) // _PAGE
    try:
        with open("/proc/self/pagemap", "rb", buffering=0) as pagemap:
            data = os.pread(pagemap.fileno(), count * 8, first * 8)
    except OSError:
        return False
    if len(data) != count * 8:
        return False
    entries = array.array("Q")
    entries.frombytes(data)
    return {entry >> 61 for entry in entries} <= {0, 1, 5}  # absent, or present file page
