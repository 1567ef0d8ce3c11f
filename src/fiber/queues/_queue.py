"""``Queue``, ``SimpleQueue`` and ``JoinableQueue`` shared by processes on any hosts: the
items live on the creating process's hub, as the frames they arrived in. The design:
docs/contributing/queues.md ("The queue itself"; items lent ahead), and what a reset
does: docs/contributing/resets.md."""

from __future__ import annotations

import queue as _queue
import threading
import time
import traceback
import weakref
from multiprocessing.context import BaseContext
from typing import Callable, Generic, List, Optional, Sequence, Tuple, TypeVar

from .._core._clients import get_client
from .._core._served import Count, Handle, wait_seconds
from .._process_state import here
from ..config import get_config
from ..transport import receipts
from ..transport.client import ConnectionLost, again_on_a_new_connection
from ..transport.local import LateReply, local_server
from ..transport.operations import reply_of
from ..transport.serialization import Frame, loads
from ..transport.unpicklable import dumps_explained
from ._ends import QueueEnd
from ._lending import Lease
from ._reader import QueueReader, reader_of
from ._service import Get, PutWait, QueueOps, QueueService, TaskDone, Withdraw

__all__ = ["Queue", "SimpleQueue", "JoinableQueue"]

#: An item (typed as typeshed types multiprocessing's queues: ``Queue[int]``).
_T = TypeVar("_T")


def _new_lease_lock() -> None:
    """In a forked child: a lock another thread of the parent held at the fork stays
    held in the child for ever."""
    here.api.queue_lease_lock = threading.Lock()


here.after_fork_in_child(_new_lease_lock)


def _ignore(status: bytes, frames: Sequence[Frame]) -> None:
    """The late answer to a put its caller gave up on: admitted (then it stays, as a put
    that completed), withdrawn or timed out; nothing is left to do."""


class Queue(Handle, Generic[_T]):
    """A process- and host-shared FIFO queue with the API of ``multiprocessing.Queue``."""

    _joinable = False

    def __init__(self, maxsize: int = 0, *, ctx: Optional[BaseContext] = None) -> None:
        if not isinstance(maxsize, int) or isinstance(maxsize, bool):
            raise TypeError(f"maxsize must be an int, got {maxsize!r}")
        self._maxsize = maxsize
        self._closed = False
        super().__init__(QueueService(maxsize, self._joinable), b"q")

    def __getstate__(self) -> Tuple[Tuple[object, ...], int]:
        return (super().__getstate__(), self._maxsize)

    def __setstate__(self, state: Tuple[Tuple[object, ...], int]) -> None:
        base, self._maxsize = state
        super().__setstate__(base)
        self._closed = False

    def put(self, obj: _T, block: bool = True, timeout: Optional[float] = None) -> None:
        """Put ``obj`` in the queue.

        A blocking put on a bounded queue that its caller abandons (KeyboardInterrupt, an
        exception raised by a signal handler) is withdrawn: its item is not put, unless
        the server admitted it at that very moment, when it counts as put.

        An ``obj`` that cannot be pickled is not put, and ``put`` returns, as with
        ``multiprocessing``, whose feeder thread pickles it later: the error (naming the
        part that failed) goes to ``_on_queue_feeder_error``, which prints it to stderr,
        and the queue goes on.

        Raises:
            queue.Full: the queue is bounded and stayed full (``block``/``timeout``).
            ValueError: the queue was closed in this process.
        """
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        try:
            frames = dumps_explained(obj, "the item put on the queue", "item")
        except Exception as e:
            self._on_queue_feeder_error(e, obj)
            return
        if self._maxsize <= 0:
            self._send(QueueOps.PUT, frames)
        else:
            self._put_frames(frames, block, timeout)

    @staticmethod
    def _on_queue_feeder_error(e: Exception, obj: object) -> None:
        """Report that ``obj`` could not be pickled (``e``) and was dropped: printed to
        stderr. The standard library's hook of the same name, which a subclass overrides
        (``concurrent.futures`` does, to fail the task's future)."""
        traceback.print_exception(type(e), e, e.__traceback__)

    def _put_frames(self, frames: Sequence[Frame], block: bool, timeout: Optional[float]) -> None:
        """Put the pickled item ``frames`` (see `put`)."""
        if self._maxsize <= 0:
            self._send(QueueOps.PUT, frames)
            return
        ticket = receipts.ticket()  # asked again with it after a reset: put once
        try:
            status, _ = self._ask_again(
                QueueOps.PUT_WAIT,
                lambda left: PutWait(wait_seconds(block, left), ticket, frames).frames(),
                _ignore, timeout)
        except BaseException:
            self._withdraw(ticket)
            raise
        if status == b"full":
            raise _queue.Full

    def _withdraw(self, ticket: bytes) -> None:
        """Take back a put its caller gave up on, unless the server admitted it already."""
        try:
            self._send(QueueOps.WITHDRAW, Withdraw(ticket).frames())
        except Exception:
            pass  # the server is gone, and the parked put with it

    def get(self, block: bool = True, timeout: Optional[float] = None) -> _T:
        """Remove and return an item.

        A blocking get that its caller abandons (KeyboardInterrupt, an exception raised
        by a signal handler, which propagates as it was raised) is withdrawn: an item
        the hub had handed it already goes back to the front of the queue.

        Raises:
            queue.Empty: nothing arrived in time (``block``/``timeout``).
            ValueError: the queue was closed in this process.
        """
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        lease = self._lease(make=False) if "_lease_" in self.__dict__ else None
        if lease is not None:  # items lent ahead come first (see fiber.queues._lending)
            t0 = time.monotonic()
            lent = lease.take(block, timeout)
            if lent is not None:
                item: _T = loads(lent)
                return item
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - t0))
        status, frames = self._get(block, timeout)
        if status == b"empty":
            raise _queue.Empty
        if status == b"more":  # a backlog: a consumer elsewhere pulls some ahead
            try:
                lease = self._lease(make=True)
                if lease is not None:
                    lease.pull()
            except Exception:
                pass  # lending is an optimisation: the item got is returned in any case
        got: _T = loads(frames)
        return got

    def _get(self, block: bool, timeout: Optional[float]) -> Tuple[bytes, List[Frame]]:
        """Ask the hub for an item. A ``get`` whose connection fails under it is asked
        again, with the same ticket, on a new connection: if the hub had handed it an
        item, that reply was lost (a reset), and the hub sends the same item again (see
        fiber.transport.receipts); a hub that cannot be reached is gone. Where no reset
        can cut the request off (the creator's own hub, a Unix socket) it is asked once,
        with no ticket: the round trip of every ``get`` on one host pays for nothing."""
        try:
            client = get_client(self._address)  # (within the connect timeout: see _request)
            if not client.may_reset:
                status, frames = client.request(self._name, QueueOps.GET,
                                                Get(wait_seconds(block, timeout)).frames(),
                                                on_late=self._give_back,
                                                withdraw=QueueOps.CANCEL)
                return (status, frames) if status != b"err" else self._checked(status, frames)
        except ConnectionLost as e:
            raise self._lost(e) from e
        asked = receipts.ticket()
        return self._ask_again(
            QueueOps.GET, lambda left: Get(wait_seconds(block, left), asked).frames(),
            self._give_back, timeout, QueueOps.CANCEL)

    def _ask_again(self, op: bytes, frames: Callable[[Optional[float]], List[Frame]],
                   on_late: LateReply, timeout: Optional[float], withdraw: bytes = b""
                   ) -> Tuple[bytes, List[Frame]]:
        """``op`` with ``frames(left)`` (``left``: what remains of ``timeout``), asked
        again on a new connection while its connection fails under it: its frames
        carry its ticket, so the hub answers it once. ``on_late``, ``withdraw``: as
        `fiber.transport.client.Client.request`'s."""
        start = time.monotonic()

        def ask() -> Tuple[bytes, List[Frame]]:
            left = timeout if timeout is None else max(0.0, timeout - (time.monotonic() - start))
            return self._request(op, frames(left), on_late=on_late, withdraw=withdraw)

        return again_on_a_new_connection(ask)

    def _request(self, op: bytes, frames: Sequence[Frame] = (),
                 on_late: Optional[LateReply] = None,
                 again: Optional[bool] = None,
                 withdraw: bytes = b"") -> Tuple[bytes, List[Frame]]:
        """As `Handle._request`; in a process that holds items lent ahead, a count and a
        put that may not wait go on the lease's connection, after the acknowledgements
        of what this process took: a ``get`` then ``empty()`` says True, and a
        ``put_nowait`` into the room a ``get`` made finds it. (If that connection is
        gone, they go as other requests do.)"""
        if op == QueueOps.SIZE or (op == QueueOps.PUT_WAIT and PutWait.wait_of(frames) == 0):
            lease = self._lease(make=False)
            if lease is not None:
                reply = lease.request(op, list(frames))
                if reply is not None:
                    return self._checked(*reply)
        return super()._request(op, frames, on_late, again, withdraw)

    def _lease(self, make: bool) -> Optional[Lease]:
        """This handle's lease of items lent ahead, if it has one; with ``make``, made at
        the second backlog a ``get`` met (a handle that gets once, as one unpickled for a
        single task, does not borrow), in a process other than the queue's creator, when
        ``queue_prefetch`` > 0."""
        lease: Optional[Lease] = self.__dict__.get("_lease_")
        if lease is not None and not lease.broken and lease.pid == here.pid:
            return lease
        if not make or local_server(self.hub_address) is not None:
            return None  # the creator reaches its hub with no round trip
        self.__dict__["_backlogs"] = seen = self.__dict__.get("_backlogs", 0) + 1
        batch = get_config().queue_prefetch
        if batch <= 0 or seen < 2:
            return None
        with here.api.queue_lease_lock:
            lease = self.__dict__.get("_lease_")
            if lease is None or lease.broken or lease.pid != here.pid:
                ended = self.__dict__.pop("_lease_end", None)
                if ended is not None:
                    ended.detach()  # the old lease ended by itself
                lease = Lease(self.hub_address, self.service_name, batch)
                self.__dict__["_lease_"] = lease
                self.__dict__["_lease_end"] = weakref.finalize(self, lease.close)
        return lease

    def _give_back(self, status: bytes, frames: Sequence[Frame]) -> None:
        if status in (b"ok", b"more"):
            self._send(QueueOps.UNGET, frames)

    def put_nowait(self, obj: _T) -> None:
        """Put ``obj`` without waiting: ``put(obj, False)``.

        Raises:
            queue.Full: the queue is bounded and full.
            ValueError: the queue was closed in this process.
        """
        self.put(obj, False)

    def get_nowait(self) -> _T:
        """Remove and return an item if one is there now: ``get(False)``.

        Raises:
            queue.Empty: the queue is empty.
            ValueError: the queue was closed in this process.
        """
        return self.get(False)

    def qsize(self) -> int:
        """The number of items in the queue, as its server counts them.

        Unlike ``multiprocessing``'s, it works on every platform (no ``sem_getvalue``); like
        any shared count it may be stale by the time it is read. Items put without a bound
        (fire-and-forget) are counted once they reach the server: ``join_thread`` first to
        count this thread's own puts.

        Raises:
            fiber.errors.TransportError: the queue's creator process is gone or unreachable.
        """
        _, frames = self._request(QueueOps.SIZE, again=True)  # a count: safe to ask again
        return reply_of(Count, frames).n

    def empty(self) -> bool:
        """Whether the queue holds no item now (``qsize() == 0``; as unreliable as in
        multiprocessing, since other processes may put or get meanwhile).

        Raises:
            fiber.errors.TransportError: the queue's creator process is gone or unreachable.
        """
        return self.qsize() == 0

    def full(self) -> bool:
        """Whether a bounded queue holds ``maxsize`` items now (always False if unbounded).

        Raises:
            fiber.errors.TransportError: the queue's creator process is gone or unreachable.
        """
        return self._maxsize > 0 and self.qsize() >= self._maxsize

    def close(self) -> None:
        """No more items will be put or got by this process."""
        self._closed = True
        lease = self.__dict__.pop("_lease_", None)
        if lease is not None and lease.pid == here.pid:
            lease.close()  # what it held goes back to the queue
        reader = self.__dict__.get("_reader_end")
        if reader is not None:
            reader.close()

    @property
    def _reader(self) -> QueueReader:
        """The queue as a connection to wait on (``multiprocessing.connection.wait``), as
        the standard library's queues have one; in the creating process only, made on
        first use. ``concurrent.futures.ProcessPoolExecutor`` waits on its result queue so.

        Raises:
            NotImplementedError: in a process that did not create the queue.
        """
        with here.api.queue_reader_lock:
            reader = self.__dict__.get("_reader_end")
            if reader is None:
                reader = self.__dict__["_reader_end"] = reader_of(self)
            return reader

    def join_thread(self) -> None:
        """Wait until every item this thread put has reached the queue's server."""
        self._request(QueueOps.SYNC, again=True)

    def cancel_join_thread(self) -> None:
        """Kept for compatibility: a put is written to the socket before it returns."""

    def __repr__(self) -> str:
        # as multiprocessing's: <multiprocessing.queues.Queue object at 0x7f...>
        cls = type(self)
        return f"<{cls.__module__}.{cls.__qualname__} object at {id(self):#x}>"


class JoinableQueue(Queue[_T]):
    """A Queue whose items are counted until ``task_done``; ``join`` waits for zero."""

    _joinable = True

    def task_done(self) -> None:
        """Mark one item as processed (asked again, with its ticket, if a reset cuts it
        off: counted once).

        Raises:
            ValueError: called more times than there were items.
        """
        asked = receipts.ticket()
        frames = TaskDone(asked).frames()
        again_on_a_new_connection(lambda: self._request(QueueOps.TASK_DONE, frames))

    def join(self) -> None:
        """Block until every item put has been marked ``task_done``. A wait: asked again
        on a new connection if a reset cuts it off (the server keeps no state for it)."""
        self._request(QueueOps.JOIN, again=True)


class SimpleQueue(Queue[_T]):
    """An unbounded queue with ``put``, ``get``, ``empty`` and ``close``."""

    def __init__(self, *, ctx: Optional[BaseContext] = None) -> None:
        super().__init__(0, ctx=ctx)

    def get(self) -> _T:  # type: ignore[override]
        """Remove and return an item, waiting as long as it takes.

        Raises:
            ValueError: the queue was closed in this process.
            fiber.errors.TransportError: the queue's creator process is gone or unreachable.
        """
        return super().get()

    @property
    def reader(self) -> QueueEnd:
        """The original fiber's ``SimpleQueuePush.reader``: ``reader.recv()`` is ``get()``."""
        return QueueEnd(self, writable=False)

    @property
    def writer(self) -> QueueEnd:
        """The original fiber's ``SimpleQueuePush.writer``: ``writer.send(x)`` is
        ``put(x)``."""
        return QueueEnd(self, writable=True)

    def put(self, obj: _T) -> None:  # type: ignore[override]
        """Put ``obj`` in the queue (unbounded: it does not wait for the queue's server).

        As ``multiprocessing.SimpleQueue.put``, which pickles in the caller, an ``obj``
        that cannot be pickled raises here (naming the part that failed).

        Raises:
            ValueError: the queue was closed in this process.
            pickle.PicklingError, TypeError, AttributeError: ``obj`` cannot be pickled.
        """
        if self._closed:
            raise ValueError(f"Queue {self!r} is closed")
        self._put_frames(dumps_explained(obj, "the item put on the queue", "item"), True, None)
