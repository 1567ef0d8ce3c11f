"""``Event``: a flag that processes on any hosts wait on, served by its creator's hub.

    event.wait(t) ── [wait, t] ─▶ EventService: answered ok once set (no at the timeout)
    event.set() ──── [set] ─────▶ every waiter answered ok; later waits at once

A `Handle` like the other primitives (see `fiber.synchronize._primitives`); its waits
outlive a connection's reset (`fiber._core._parking`).
"""

from __future__ import annotations

from multiprocessing.context import BaseContext
from typing import List, Optional

from .._core._parking import ABANDON, Parking
from .._core._served import Handle, Wait
from ..transport.operations import handles
from ..transport.serialization import Frame
from ..transport.server import Peer, Server

__all__ = ["Event", "EventService", "EventOps"]


class EventOps:
    """The event protocol's operations."""

    ABANDON = ABANDON  # (every parking service's: see fiber._core._parking)
    WAIT = b"wait"
    SET = b"set"
    CLEAR = b"clear"
    IS_SET = b"is_set"


class EventService(Parking):
    def __init__(self) -> None:
        super().__init__()
        self.flag = False

    @handles(EventOps.WAIT, Wait)
    def wait(self, server: Server, peer: Peer, req_id: bytes, msg: Wait) -> None:
        """Answered ``ok`` once the flag is set, ``no`` at the timeout."""
        self.answer_or_park(server, peer, req_id, msg.seconds, self.flag)

    protocol = "event"

    @handles(EventOps.SET)
    def set(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        self.flag = True
        for w in list(self.waiters):
            server.reply(self.take(w).peer, w.req_id, b"ok")
        server.reply(peer, req_id, b"ok")

    @handles(EventOps.CLEAR)
    def clear(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        self.flag = False
        server.reply(peer, req_id, b"ok")

    @handles(EventOps.IS_SET)
    def is_set(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        server.reply(peer, req_id, b"ok" if self.flag else b"no")


class Event(Handle):
    """A flag that processes wait on; the API of ``multiprocessing.Event``."""

    _asks_again = True  # its waits outlive a reset (see Handle, fiber._core._parking)

    def __init__(self, *, ctx: Optional[BaseContext] = None) -> None:
        super().__init__(EventService(), b"E")

    def is_set(self) -> bool:
        """Whether the flag is set (one round trip to the creator's hub).

        Raises:
            fiber.errors.TransportError: the event's creator process is gone or unreachable.
        """
        return self._request(EventOps.IS_SET)[0] == b"ok"

    def set(self) -> None:
        """Set the flag and wake every process waiting on it; later waits return at once.

        Raises:
            fiber.errors.TransportError: the event's creator process is gone or unreachable.
        """
        self._request(EventOps.SET)

    def clear(self) -> None:
        """Reset the flag, so that ``wait`` blocks again until the next ``set``.

        Raises:
            fiber.errors.TransportError: the event's creator process is gone or unreachable.
        """
        self._request(EventOps.CLEAR)

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait until the flag is set or ``timeout`` s pass; returns the flag."""
        status, _ = self._request(EventOps.WAIT, Wait.of(True, timeout).frames())
        return status == b"ok"

    def __repr__(self) -> str:
        # as multiprocessing's: <Event at 0x7f... unset>
        try:
            state = "set" if self.is_set() else "unset"
        except Exception:
            state = "unknown"
        return f"<{type(self).__name__} at {id(self):#x} {state}>"
