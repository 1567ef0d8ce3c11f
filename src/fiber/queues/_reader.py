"""``queue._reader``: a queue as a waitable connection, in the process that created it.

The standard library's queues are OS pipes, and code written against them waits on the
pipe: ``concurrent.futures.ProcessPoolExecutor``'s manager thread calls
``multiprocessing.connection.wait([result_queue._reader, ...] + sentinels)`` and then
``result_queue._reader.recv()``. A fiber queue is served by its creator's hub, so there:

    QueueService.handle (hub lock) ── items became non-empty ──▶ one byte in a pipe
                                   ── items became empty ──────▶ the byte read back
    QueueReader.fileno()  the pipe's read end: readable exactly while items are queued
    QueueReader.recv()    queue.get()

The pipe is made on the first use of ``_reader``; until then the service only checks that
it has no signal (the queue's hot path is unchanged).
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Optional

from .._core import _runtime
from ..transport.sockets import readable

__all__ = ["ReadySignal", "QueueReader", "reader_of"]


class ReadySignal:
    """A pipe whose read end is readable while a queue holds items; used under the hub's
    lock by the queue's service."""

    def __init__(self) -> None:
        self.fd, self._w = os.pipe()
        os.set_blocking(self.fd, False)
        self._raised = False

    def show(self, ready: bool) -> None:
        """Make the read end readable (``ready``) or not."""
        if ready == self._raised or self._w < 0:
            return
        if ready:
            os.write(self._w, b"!")
        else:
            os.read(self.fd, 1)
        self._raised = ready

    def close(self) -> None:
        for fd in (self.fd, self._w):
            if fd >= 0:
                os.close(fd)
        self.fd = self._w = -1


class QueueReader:
    """What code written for ``multiprocessing.SimpleQueue._reader`` uses: ``fileno()``
    (for ``multiprocessing.connection.wait`` and ``select``), ``poll``, ``recv``,
    ``close``. ``recv`` takes the next item, as ``get()`` does."""

    def __init__(self, queue: Any, service: Any) -> None:
        hub = _runtime.hub()
        self._queue = weakref.ref(queue)  # the queue keeps its reader, not the other way
        self._signal = ReadySignal()
        with hub.lock:
            service.signal = self._signal
            self._signal.show(bool(service.items))
        self._close = weakref.finalize(self, _detach, hub, service, self._signal)
        # the process's end closes the pipe (older typesheds: finalize has no atexit slot)
        self._close.atexit = False  # type: ignore[misc, unused-ignore]

    @property
    def closed(self) -> bool:
        return not self._close.alive

    def fileno(self) -> int:
        if self.closed:
            raise OSError("handle is closed")
        return self._signal.fd

    def poll(self, timeout: Optional[float] = 0.0) -> bool:
        """True if an item is queued, waiting up to ``timeout`` s (None: until one is)."""
        return bool(readable([self.fileno()], timeout))

    def recv(self) -> Any:
        """Remove and return the next item (waiting for one)."""
        queue = self._queue()
        if queue is None or self.closed:
            raise OSError("handle is closed")
        return queue.get()

    def close(self) -> None:
        self._close()


def _detach(hub: Any, service: Any, signal: ReadySignal) -> None:
    with hub.lock:
        if service.signal is signal:
            service.signal = None
        signal.close()


def reader_of(queue: Any) -> QueueReader:
    """A new reader of ``queue``, which this process created.

    Raises:
        NotImplementedError: another process created the queue (its items are not known
            here until asked for).
    """
    hub = _runtime.hub_if_started()
    service = hub.service(queue.service_name) if hub is not None else None
    if service is None or queue.hub_address != hub.address:  # type: ignore[union-attr]
        raise NotImplementedError(
            "fiber: a queue's _reader (to wait on it with multiprocessing.connection.wait) "
            "exists only in the process that created the queue")
    return QueueReader(queue, service)
