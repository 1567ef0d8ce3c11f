"""``Barrier``: ``parties`` processes on any hosts wait until all have arrived.

    party k (any process)                    hub of the Barrier's creator
    ─────────────────────                    ────────────────────────────
    wait(t) ── [wait, t] ──────────────────▶ BarrierService: count, parked waiters
                                             arrival < parties: parked (t passes: broken)
    last party ◀── action ────────────────── (if an action: the last arrival runs it)
              ── [action_done | failed] ───▶ everyone answered with its index | broken
    (gave up) [abandon, wait's id] ────────▶ its party withdrawn (count - 1), if not passed
    abort() / reset() / a party vanishes ──▶ broken: BrokenBarrierError in every waiter

As ``threading.Barrier``: a timeout, an abort, a failing action break it until ``reset``; an
abandoned wait (a signal handler's exception) withdraws its party. A waiting process that
vanishes (its connection closes) breaks it, rather than leaving the others waiting forever.
"""

from __future__ import annotations

import functools
from multiprocessing.context import BaseContext
from threading import BrokenBarrierError
from typing import Callable, List, Optional, Tuple

from .._core._parking import ABANDON, Parking, Waiter
from .._core._served import Count, Handle, Wait
from ..transport.client import Cancel
from ..transport.operations import handles, reply_of
from ..transport.receipts import names_wait
from ..transport.serialization import Frame, loads
from ..transport.server import Peer, Server

__all__ = ["Barrier", "BarrierService", "BarrierOps", "BrokenBarrierError"]


class BarrierOps:
    """The barrier protocol's operations."""

    ABANDON = ABANDON  # (every parking service's: see fiber._core._parking)
    WAIT = b"wait"
    ACTION_DONE = b"action_done"
    ACTION_FAILED = b"action_failed"
    ABORT = b"abort"
    RESET = b"reset"
    INFO = b"info"


class BarrierService(Parking):
    """``parties`` arrivals release everyone; the last runs the action first, if any."""

    protocol = "barrier"

    def __init__(self, parties: int, has_action: bool) -> None:
        super().__init__()
        self.parties = parties
        self.has_action = has_action
        self.count = 0
        self.broken = False
        self.runner: Optional[Peer] = None  # the peer running the action
        self.runner_req = b""  # the wait it was answered ``action`` to
        self.later: List[Tuple[Peer, bytes, Wait]] = []  # arrivals during the action

    @handles(BarrierOps.WAIT, Wait)
    def wait(self, server: Server, peer: Peer, req_id: bytes, msg: Wait) -> None:
        """Answered ``ok`` (or ``action``, to the party that runs the action) with the
        party's index once all have come, ``broken`` if the barrier breaks."""
        if self.runner is not None:
            self.later.append((peer, req_id, msg))
        elif self.broken:
            server.reply(peer, req_id, b"broken")
        else:
            index = self.count
            self.count += 1
            if self.count < self.parties:
                self.park(server, peer, req_id, msg.seconds, index)
            elif self.has_action:
                self.runner, self.runner_req = peer, req_id
                server.reply(peer, req_id, b"action", Count(index).frames())
            else:
                self._pass(server)
                server.reply(peer, req_id, b"ok", Count(index).frames())

    @handles(BarrierOps.ACTION_DONE)
    def action_done(self, server: Server, peer: Peer, req_id: bytes,
                    payload: List[Frame]) -> None:
        self._action_ended(server, peer, req_id, ok=True)

    @handles(BarrierOps.ACTION_FAILED)
    def action_failed(self, server: Server, peer: Peer, req_id: bytes,
                      payload: List[Frame]) -> None:
        self._action_ended(server, peer, req_id, ok=False)

    def _action_ended(self, server: Server, peer: Peer, req_id: bytes, ok: bool) -> None:
        self.runner = None
        if ok and not self.broken:
            self._pass(server)
            server.reply(peer, req_id, b"ok")
        else:
            self._break(server)
            server.reply(peer, req_id, b"broken")
        self._arrive_later(server)

    def _arrive_later(self, server: Server) -> None:
        """The arrivals that came while the action ran arrive now."""
        later, self.later = self.later, []
        for args in later:
            self.wait(server, args[0], args[1], args[2])

    @handles(ABANDON, Cancel)
    def abandon(self, server: Server, peer: Peer, req_id: bytes, msg: Cancel) -> None:
        """A wait its caller gave up on (an exception raised by a signal handler,
        KeyboardInterrupt) withdraws its party, as ``threading.Barrier.wait``'s
        ``count -= 1`` in a ``finally``: the barrier is not broken, and the others wait
        for one more arrival. So does the last arrival, if it gave up before it took its
        ``action`` answer (it runs no action); a wait answered before (the barrier passed
        or broke) withdraws nothing. Answered in any case. A wait asked again on a new
        connection after a reset is found from there too (`names_wait`)."""
        gave_up = msg.req_id
        for w in [w for w in self.waiters if names_wait(w.peer, w.req_id, peer, gave_up)]:
            server.receipts.forget(gave_up)
            self.take(w)
            self.count -= 1
        for entry in [x for x in self.later if names_wait(x[0], x[1], peer, gave_up)]:
            self._drop_later(entry)  # not counted yet
            server.receipts.forget(gave_up)
        if self.runner is not None and names_wait(self.runner, self.runner_req, peer, gave_up):
            self.count = max(0, self.count - 1)  # (0 if broken or reset meanwhile)
            self.runner = None
            self._arrive_later(server)
        server.reply(peer, req_id, b"ok")

    @handles(BarrierOps.ABORT)
    def abort(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        self._break(server)
        server.reply(peer, req_id, b"ok")

    @handles(BarrierOps.RESET)
    def reset(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        if self.waiters:
            self._break(server)
        self.broken, self.count = False, 0
        server.reply(peer, req_id, b"ok")

    @handles(BarrierOps.INFO)
    def info(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """Answered with ``(count, broken)``."""
        server.reply_value(peer, req_id, (self.count, self.broken))

    def _pass(self, server: Server) -> None:
        for w in list(self.waiters):
            self.take(w)
            server.reply(w.peer, w.req_id, b"ok", Count(w.data).frames())
        self.count = 0

    def _break(self, server: Server) -> None:
        self.broken = True
        for w in list(self.waiters):
            server.reply(self.take(w).peer, w.req_id, b"broken")
        self.count = 0

    def timed_out(self, server: Server, w: Waiter) -> None:
        server.reply(w.peer, w.req_id, b"broken")
        self._break(server)

    def dropped(self, server: Server, w: Waiter) -> None:
        self._break(server)  # a party vanished: the others would wait forever

    def peer_gone(self, server: Server, peer: Peer) -> None:
        super().peer_gone(server, peer)
        self.later = [x for x in self.later if x[0] is not peer or server.receipts.keeps_waiting(
            server, x[1], peer, functools.partial(self._drop_later, x))]
        if self.runner is peer and not peer.reset:  # (reset: it may come back)
            self.runner = None
            self._break(server)

    def _drop_later(self, entry: Tuple[Peer, bytes, Wait]) -> None:
        self.later = [x for x in self.later if x is not entry]

    def process_gone(self, server: Server, process_id: bytes) -> None:
        super().process_gone(server, process_id)
        for entry in [x for x in self.later if x[0].process_id == process_id]:
            self._drop_later(entry)
            server.receipts.forget(entry[1])
        if self.runner is not None and self.runner.process_id == process_id:
            self.runner = None  # the action's runner never came back
            self._break(server)


def _withdrawn(status: bytes, frames: List[Frame]) -> None:
    """The late answer to an abandoned wait: the barrier passed (this party was released)
    or broke before the withdraw came, and nothing is held; an ``action`` answer is undone
    by the withdraw itself (see `BarrierService.abandon`)."""


class Barrier(Handle):
    """``parties`` processes wait until all have arrived; the API of ``multiprocessing.Barrier``.

    ``action`` (picklable) is run by the last process to arrive, before the others are
    released; ``timeout`` is the default for ``wait``. A wait that times out, an abort, a
    failing action or a waiting process that vanishes break the barrier:
    ``BrokenBarrierError`` in every waiter until ``reset``.
    """

    _asks_again = True  # its waits outlive a reset (see Handle, fiber._core._parking)

    def __init__(self, parties: int, action: Optional[Callable[[], object]] = None,
                 timeout: Optional[float] = None, *, ctx: Optional[BaseContext] = None) -> None:
        if parties < 1:
            raise ValueError("parties must be > 0")
        self._parties, self._action, self._timeout = parties, action, timeout
        super().__init__(BarrierService(parties, action is not None), b"B")

    def __getstate__(self) -> Tuple[Tuple[object, ...], int, Optional[Callable[[], object]],
                                    Optional[float]]:
        return (super().__getstate__(), self._parties, self._action, self._timeout)

    def __setstate__(self, state: Tuple[Tuple[object, ...], int,
                                        Optional[Callable[[], object]], Optional[float]]
                     ) -> None:
        base, self._parties, self._action, self._timeout = state
        super().__setstate__(base)

    def wait(self, timeout: Optional[float] = None) -> int:
        """Wait for the other parties; returns this arrival's index in 0..parties-1.

        A wait its caller abandons (KeyboardInterrupt, an exception raised by a signal
        handler) withdraws its party, as ``threading.Barrier``'s: the barrier is not
        broken, and passes once ``parties`` waits that were not abandoned have come. One
        answered before the withdraw came (passed or broken) leaves the others as they are.

        Raises:
            threading.BrokenBarrierError: the barrier is or became broken.
        """
        if timeout is None:
            timeout = self._timeout
        status, frames = self._request(BarrierOps.WAIT, Wait.of(True, timeout).frames(),
                                       on_late=_withdrawn, withdraw=ABANDON)
        if status == b"broken":
            raise BrokenBarrierError
        index = reply_of(Count, frames).n
        if status == b"action":
            assert self._action is not None
            try:
                self._action()
            except BaseException:
                self._request(BarrierOps.ACTION_FAILED)
                raise
            if self._request(BarrierOps.ACTION_DONE)[0] == b"broken":
                raise BrokenBarrierError
        return index

    def abort(self) -> None:
        """Break the barrier: current and future waits raise BrokenBarrierError."""
        self._request(BarrierOps.ABORT)

    def reset(self) -> None:
        """Back to the empty, unbroken state; current waiters get BrokenBarrierError."""
        self._request(BarrierOps.RESET)

    @property
    def parties(self) -> int:
        """The number of processes that must call ``wait`` for all of them to pass."""
        return self._parties

    @property
    def n_waiting(self) -> int:
        """The number of parties waiting now (asked of the creator's hub).

        Raises:
            fiber.errors.TransportError: the barrier's creator process is gone or unreachable.
        """
        return int(loads(self._request(BarrierOps.INFO)[1])[0])

    @property
    def broken(self) -> bool:
        """Whether the barrier is broken (waits raise ``BrokenBarrierError`` until ``reset``).

        Raises:
            fiber.errors.TransportError: the barrier's creator process is gone or unreachable.
        """
        return bool(loads(self._request(BarrierOps.INFO)[1])[1])

    def __repr__(self) -> str:
        # as multiprocessing's (threading's): <...Barrier at 0x7f...: waiters=0/2>
        cls = type(self)
        try:
            count, broken = loads(self._request(b"info")[1])
            state = "broken" if broken else f"waiters={count}/{self._parties}"
        except Exception:
            state = "unknown"
        return f"<{cls.__module__}.{cls.__qualname__} at {id(self):#x}: {state}>"
