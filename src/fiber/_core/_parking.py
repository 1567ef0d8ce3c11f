"""Requests that wait on a server (FIFO waiters, each with its own timeout), kept across
a reset of their connection for their caller to ask again; `Made` remembers the requests
that must not be made twice. The base of the services in `fiber.synchronize`; it runs
under ``Server.lock`` like every service. The design: docs/contributing/resets.md, "Parking"."""

from __future__ import annotations

import collections
import functools
import struct
import threading
from typing import Any, List, Optional, Tuple

from ..transport.client import Cancel
from ..transport.operations import handles
from ..transport.receipts import TICKET_BYTES, names_wait
from ..transport.server import Peer, Server, Service, Timer

__all__ = ["Parking", "Waiter", "Made", "Owner", "Q", "tid", "ABANDON"]

#: Every parking service's op that drops a wait its caller gave up on (a ``withdraw``:
#: see `fiber.transport.client.Client.request`); not ``cancel``, a Condition's own op.
ABANDON = b"abandon"

Q = struct.Struct("<q")
Owner = Tuple[bytes, bytes]  # (process id, thread id)


def tid() -> bytes:
    return Q.pack(threading.get_ident())


class Made:
    """The last request of each caller (by ticket) whose effect must not be made twice
    (a lock's or a semaphore's ``release``), kept after the caller's process is counted
    gone, for the callers seen last (`KEPT`).

    The server's receipts answer a request asked again after a reset as it was
    answered, but forget the answers of a process counted gone (its connection reset
    and it did not connect again within 15 s, or its host silent for the grace). If that
    process lived and asks again, the request would be made a second time: a release
    would free the lock of its next holder, or count a semaphore's unit twice. The
    service asks `again` first, and answers such a request ``ok`` without making it."""

    #: Callers remembered per object (the oldest forgotten): a few hundred bytes each.
    KEPT = 1024

    def __init__(self) -> None:
        self._last: collections.OrderedDict[bytes, bytes] = collections.OrderedDict()

    def again(self, req_id: bytes) -> bool:
        """Whether ``req_id`` was made already (its caller asks it again)."""
        return len(req_id) == TICKET_BYTES and self._last.get(req_id[:8]) == req_id

    def made(self, req_id: bytes) -> None:
        """``req_id`` was made (nothing kept for a request without a ticket)."""
        if len(req_id) == TICKET_BYTES:
            key = req_id[:8]
            self._last[key] = req_id
            self._last.move_to_end(key)
            if len(self._last) > self.KEPT:
                self._last.popitem(last=False)


class Waiter:
    __slots__ = ("peer", "req_id", "timer", "data")

    def __init__(self, peer: Peer, req_id: bytes, data: Any) -> None:
        self.peer, self.req_id, self.data = peer, req_id, data
        self.timer: Optional[Timer] = None


class Parking(Service):
    """A service whose requests may wait in FIFO order, each with its own timeout."""

    def __init__(self) -> None:
        self.waiters: List[Waiter] = []

    def park(self, server: Server, peer: Peer, req_id: bytes, wait: Optional[float],
             data: Any = None) -> Waiter:
        w = Waiter(peer, req_id, data)
        if wait is not None:
            w.timer = server.call_later(wait, lambda: self._expire(server, w))
        self.waiters.append(w)
        return w

    def answer_or_park(self, server: Server, peer: Peer, req_id: bytes, wait: Optional[float],
                       ready: bool) -> bool:
        """Answer ``ok`` when ``ready``, ``no`` when the caller will not wait, else park it.

        Returns whether it answered ``ok`` now (the caller then takes what it granted).
        """
        if ready:
            server.reply(peer, req_id, b"ok")
        elif wait == 0:
            server.reply(peer, req_id, b"no")
        else:
            self.park(server, peer, req_id, wait)
        return ready

    @handles(ABANDON, Cancel)
    def abandon(self, server: Server, peer: Peer, req_id: bytes, msg: Cancel) -> None:
        """A wait its caller gave up on (an exception raised by a signal handler,
        KeyboardInterrupt) is dropped if it is still parked, as if its connection had
        closed (`dropped`). Answered in any case: what was granted to it before (a lock,
        a semaphore's unit) was answered first, on the same connection, and its caller
        gives it back (its ``on_late``) before it takes this answer, so nothing stays
        held by a request nobody waits for. A wait asked again on a new connection after
        a reset is found from there too (`names_wait`), where its answer goes."""
        for w in [w for w in self.waiters if names_wait(w.peer, w.req_id, peer, msg.req_id)]:
            server.receipts.forget(w.req_id)  # (a ticket, asked on TCP)
            self._drop(server, w)
        server.reply(peer, req_id, b"ok")

    def take(self, w: Waiter) -> Waiter:
        self.waiters.remove(w)
        if w.timer is not None:
            w.timer.cancel()
        return w

    def _expire(self, server: Server, w: Waiter) -> None:
        if any(x is w for x in self.waiters):
            self.waiters.remove(w)
            self.timed_out(server, w)

    def timed_out(self, server: Server, w: Waiter) -> None:
        server.reply(w.peer, w.req_id, b"no")

    answers_again = True

    def peer_gone(self, server: Server, peer: Peer) -> None:
        """Waits of a connection that closed are dropped, unless their caller asked
        again on another connection or may (a reset: see above)."""
        for w in [w for w in self.waiters if w.peer is peer]:
            drop = functools.partial(self._drop, server, w)
            if not server.receipts.keeps_waiting(server, w.req_id, peer, drop):
                drop()

    def process_gone(self, server: Server, process_id: bytes) -> None:
        """The waits of a process that is gone (those a reset kept among them)."""
        for w in [w for w in self.waiters if w.peer.process_id == process_id]:
            server.receipts.forget(w.req_id)
            self._drop(server, w)

    def _drop(self, server: Server, w: Waiter) -> None:
        """Drop the wait ``w`` if it is still parked (a wait kept after a reset may have
        been answered or timed out since)."""
        if any(x is w for x in self.waiters):
            self.take(w)
            self.dropped(server, w)

    def dropped(self, server: Server, w: Waiter) -> None:
        """A waiter's connection closed (hook)."""
