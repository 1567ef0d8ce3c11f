"""``Condition``: a condition variable over a fiber Lock or RLock, on any hosts.

    waiter (holds the lock)                       hub of the Condition's creator
    ───────────────────────                       ──────────────────────────────
    wait(t): [enqueue, ticket] ─────────────────▶ ConditionService: tickets in arrival order
             lock._release_save() ─▶ (lock's hub: released, recursion count returned)
             [sleep, ticket, t] ────────────────▶ parked until notified or t passes
             lock._acquire_restore(count) ──▶ (lock's hub: waits for the lock)
    notifier (holds the lock)
    notify(n): [notify, n] ─────────────────────▶ the n oldest tickets are woken

The ticket is enqueued before the lock is released, so a notify made by whoever takes the
lock next is never missed, whichever hub serves the lock. The lock may be served by any
process (the Condition keeps its handle).
"""

from __future__ import annotations

import secrets
import time
from multiprocessing.context import BaseContext
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, TypeVar

from .._core._parking import ABANDON, Parking, Q, Waiter
from .._core._served import Count, Handle, decode_wait, pack_wait, wait_seconds
from ..transport.operations import handles, reply_of
from ..transport.serialization import Frame
from ..transport.server import Peer, Server
from ._primitives import Lock, RLock

__all__ = ["Condition", "ConditionService", "ConditionOps"]

#: What a ``wait_for`` predicate returns (``wait_for`` returns its last value).
_T = TypeVar("_T")


class ConditionOps:
    """The condition protocol's operations."""

    ABANDON = ABANDON  # (every parking service's: see fiber._core._parking)
    NOTIFY = b"notify"
    ENQUEUE = b"enqueue"
    SLEEP = b"sleep"
    CANCEL = b"cancel"
    COUNT = b"count"


class Notify(NamedTuple):
    """``notify``: how many waiters to wake (-1: all)."""

    n: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Notify:
        return cls(Q.unpack(payload[0])[0])

    def frames(self) -> List[Frame]:
        return [Q.pack(self.n)]


class Ticket(NamedTuple):
    """``enqueue``, ``cancel``: the waiter's ticket (its place among the waiters)."""

    ticket: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Ticket:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.ticket]


class Sleep(NamedTuple):
    """``sleep``: the waiter's ticket, and how long it may wait to be notified."""

    ticket: bytes
    wait: Optional[float]  # as `Wait`'s seconds

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Sleep:
        return cls(bytes(payload[0]), decode_wait(payload[1]))

    def frames(self) -> List[Frame]:
        return [self.ticket, pack_wait(self.wait)]


class ConditionService(Parking):
    """Wait tickets in arrival order; ``notify`` wakes the oldest ones.

    A waiter enqueues its ticket *before* it releases the lock, so a ``notify`` made by
    whoever takes the lock next cannot be missed; it then sleeps on the ticket.
    """

    protocol = "condition"

    def __init__(self) -> None:
        super().__init__()
        self.tickets: Dict[bytes, Optional[Waiter]] = {}  # in arrival order
        self.notified: Set[bytes] = set()
        self.owners: Dict[bytes, bytes] = {}

    @handles(ConditionOps.NOTIFY, Notify)
    def notify(self, server: Server, peer: Peer, req_id: bytes, msg: Notify) -> None:
        """Wake the first ``msg.n`` waiters (-1: all)."""
        n = msg.n
        woken = 0
        for ticket in list(self.tickets):
            if 0 <= n <= woken:
                break
            woken += self._wake(server, ticket)
        server.reply(peer, req_id, b"ok")

    @handles(ConditionOps.ENQUEUE, Ticket)
    def enqueue(self, server: Server, peer: Peer, req_id: bytes, msg: Ticket) -> None:
        """A waiter takes its place, before it lets go of the lock."""
        ticket = msg.ticket
        self.tickets[ticket] = None
        self.owners[ticket] = peer.process_id
        if req_id:
            server.reply(peer, req_id, b"ok")

    @handles(ConditionOps.SLEEP, Sleep)
    def sleep(self, server: Server, peer: Peer, req_id: bytes, msg: Sleep) -> None:
        """Answered ``ok`` once notified, ``no`` at the timeout."""
        ticket, wait = msg
        if ticket in self.notified or ticket not in self.tickets or wait == 0:
            self._forget(ticket, keep_waiter=True)
            server.reply(peer, req_id, b"ok" if ticket in self.notified else b"no")
            self.notified.discard(ticket)
        else:
            self.tickets[ticket] = self.park(server, peer, req_id, wait, ticket)

    @handles(ConditionOps.COUNT)
    def count(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """For repr: answered with the number of waiters not woken yet."""
        server.reply(peer, req_id, b"ok", Count(len(self.tickets)).frames())

    @handles(ConditionOps.CANCEL, Ticket)
    def cancel(self, server: Server, peer: Peer, req_id: bytes, msg: Ticket) -> None:
        """The waiter gave up."""
        ticket = msg.ticket
        self._forget(ticket)
        self.notified.discard(ticket)

    def _wake(self, server: Server, ticket: bytes) -> int:
        w = self.tickets.get(ticket)
        if w is None:
            self.tickets.pop(ticket)
            self.notified.add(ticket)
            return 1
        self._forget(ticket)
        return 1 if server.reply(w.peer, w.req_id, b"ok") else 0

    def _forget(self, ticket: bytes, keep_waiter: bool = False) -> None:
        w = self.tickets.pop(ticket, None)
        self.owners.pop(ticket, None)
        if w is not None and not keep_waiter:
            self.take(w)

    def timed_out(self, server: Server, w: Waiter) -> None:
        self.tickets.pop(w.data, None)
        self.owners.pop(w.data, None)
        server.reply(w.peer, w.req_id, b"no")

    def dropped(self, server: Server, w: Waiter) -> None:
        self.tickets.pop(w.data, None)
        self.owners.pop(w.data, None)

    def process_gone(self, server: Server, process_id: bytes) -> None:
        super().process_gone(server, process_id)  # its sleeps
        for ticket in [t for t, p in self.owners.items() if p == process_id]:
            self._forget(ticket)
            self.notified.discard(ticket)


class Condition(Handle):
    """A condition variable over a fiber ``Lock`` or ``RLock`` (a new RLock by default)."""

    _asks_again = True  # its waits outlive a reset (see Handle, fiber._core._parking)

    def __init__(self, lock: Optional[Lock] = None, *, ctx: Optional[BaseContext] = None) -> None:
        if lock is None:
            lock = RLock()
        if not isinstance(lock, Lock):
            raise TypeError(f"a fiber Condition needs a fiber Lock or RLock, not {lock!r}")
        self._lock = lock
        super().__init__(ConditionService(), b"C")

    def __getstate__(self) -> Tuple[Tuple[object, ...], Lock]:
        return (super().__getstate__(), self._lock)

    def __setstate__(self, state: Tuple[Tuple[object, ...], Lock]) -> None:
        base, self._lock = state
        super().__setstate__(base)

    def acquire(self, block: bool = True, timeout: Optional[float] = None) -> bool:
        """Acquire the underlying lock (see `fiber.synchronize.Lock.acquire`).

        Returns:
            True if the lock was taken, False if ``block`` is False or ``timeout`` passed.

        Raises:
            fiber.errors.TransportError: the lock's creator process is gone or unreachable.
        """
        return self._lock.acquire(block, timeout)

    def release(self) -> None:
        """Release the underlying lock (see `fiber.synchronize.Lock.release`).

        Raises:
            ValueError: (Lock) it is not held.
            AssertionError: (RLock) the calling thread does not own it.
        """
        self._lock.release()

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Release the lock, wait for a notify or ``timeout`` s, take the lock back.

        Returns False if the timeout passed first.

        Raises:
            AssertionError: the calling thread does not hold the lock (as multiprocessing).
            fiber.errors.TransportError: the condition's or its lock's creator is gone.
        """
        # _is_mine, _release_save, _acquire_restore: the lock protocol of the standard
        # library's conditions (multiprocessing's SemLock, threading's Condition), which
        # fiber's locks keep under the same names.
        if not self._lock._is_mine():  # noqa: SLF001
            raise AssertionError("must acquire() condition before using wait()")
        ticket = secrets.token_bytes(8)
        if self._lock.hub_address == self._address:  # same connection: ordered, no reply needed
            self._send(ConditionOps.ENQUEUE, Ticket(ticket).frames())
        else:
            self._request(ConditionOps.ENQUEUE, Ticket(ticket).frames())
        try:
            count = self._lock._release_save()  # noqa: SLF001
        except BaseException:
            self._send(ConditionOps.CANCEL, Ticket(ticket).frames())
            raise
        try:
            status, _ = self._request(ConditionOps.SLEEP,
                                      Sleep(ticket, wait_seconds(True, timeout)).frames())
        except BaseException:
            try:
                self._send(ConditionOps.CANCEL, Ticket(ticket).frames())
            except Exception:
                pass
            raise
        finally:
            self._lock._acquire_restore(count)  # noqa: SLF001
        return status == b"ok"

    def wait_for(self, predicate: Callable[[], _T], timeout: Optional[float] = None) -> _T:
        """Wait until ``predicate()`` is true or ``timeout`` s pass; returns its last value."""
        result = predicate()
        endtime = None
        waittime = timeout
        while not result:
            if waittime is not None:
                if endtime is None:
                    endtime = time.monotonic() + waittime
                else:
                    waittime = endtime - time.monotonic()
                    if waittime <= 0:
                        break
            self.wait(waittime)
            result = predicate()
        return result

    def notify(self, n: int = 1) -> None:
        """Wake up to ``n`` waiters (the calling thread must hold the lock).

        Raises:
            AssertionError: the calling thread does not hold the lock (as multiprocessing).
            fiber.errors.TransportError: the condition's creator process is gone.
        """
        if not self._lock._is_mine():  # noqa: SLF001 - the stdlib's lock protocol
            raise AssertionError("lock is not owned")
        self._request(ConditionOps.NOTIFY, Notify(max(0, n)).frames())

    def notify_all(self) -> None:
        """Wake every waiter (the calling thread must hold the lock), as ``notify`` of all.

        Raises:
            AssertionError: the calling thread does not hold the lock (as multiprocessing).
            fiber.errors.TransportError: the condition's creator process is gone or unreachable.
        """
        if not self._lock._is_mine():  # noqa: SLF001 - the stdlib's lock protocol
            raise AssertionError("lock is not owned")
        self._request(ConditionOps.NOTIFY, Notify(-1).frames())

    def __repr__(self) -> str:
        # as multiprocessing's: <Condition(<RLock(None, 0)>, 0)>, with the waiters' count
        try:
            waiters: Any = reply_of(Count, self._request(ConditionOps.COUNT, [b""])[1]).n
        except Exception:
            waiters = "unknown"
        return f"<{type(self).__name__}({self._lock!r}, {waiters})>"
