"""A thread that waits for what a server's connections will bring serves them itself,
in place of the server's thread (`StandIn`, a base of `fiber.transport.server.Server`;
see its module's docstring), and `Serving`, the block in which it does."""

from __future__ import annotations

import select
import selectors
import threading
import time
from typing import Any, Callable, List, Optional, Protocol, Tuple

from . import cpus as _cpus

__all__ = ["Serving", "StandIn", "Events", "held_here"]

Events = List[Tuple[selectors.SelectorKey, int]]


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class StandIn:
    """What lets a waiting thread serve a server's connections (`wait_serving`); the
    attributes are the server's own (set by its ``__init__``)."""

    lock: threading.RLock
    _sel: selectors.DefaultSelector  # the connections' selector
    _outer: Optional[select.epoll]  # what the server thread sleeps on, if epoll
    _serving: threading.Lock  # held by the thread that serves in its place
    _stand_in: Optional[int]
    _stopping: bool
    _thread: threading.Thread

    def _handle(self, events: Events) -> None:
        raise NotImplementedError

    def wait_serving(self, done: Callable[[], bool], timeout: Optional[float],
                     wait: Callable[[Optional[float]], bool],
                     spin: Optional[Callable[[], float]] = None) -> bool:
        """Wait up to ``timeout`` s for ``done()``, serving the connections on this thread.

        Whatever makes ``done()`` true on another thread must call `nudge` after it
        (replies to local peers do). Where this thread cannot serve (another one does, it
        holds the lock, it is the server thread, the server is stopping) it calls
        ``wait(timeout)``, the caller's ordinary wait, instead. Returns ``done()``.

        ``spin()``, asked once, gives the seconds from now for which this thread may poll
        the connections before it sleeps on them (a wait that other messages keep waking
        polls no longer): a message that comes meanwhile is read at once, without the
        wake-up of a sleeping thread (30-50 us on a VM, more than a third of a round
        trip), with the CPU's caches still warm, and the CPU has not gone idle for the
        next step either. It polls only while the host has a CPU to spare (see
        `fiber.transport.cpus.poll`).
        """
        if done():
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        budget = 0.0 if spin is None else spin()
        poll_until = time.monotonic() + budget if budget > 0 else None
        with self.serving() as serving:
            while serving and not done():
                left = _left(deadline)
                events: Events = []
                if poll_until is not None and left != 0:
                    allowance = poll_until - time.monotonic()
                    if allowance > 0:
                        events = self._poll(allowance if left is None else min(allowance, left))
                    if not events:
                        poll_until = None  # spent, or no CPU to spare: sleep from now on
                if not events:
                    events = self._sel.select(_left(deadline))
                with self.lock:
                    self._handle(events)
                if left == 0 or self._stopping:
                    break
        if done():
            return True
        left = _left(deadline)
        return left != 0 and wait(left)

    def _poll(self, seconds: float) -> Events:
        """The connections' events, polled for up to ``seconds`` while a CPU is spare
        (`fiber.transport.cpus.poll`): [] if none came."""
        sel = self._sel
        return _cpus.poll(lambda: sel.select(0), seconds)

    def serving(self) -> Serving:
        """A block in which this thread serves the connections (when it can: ``as``
        gives whether it does), waiting in `wait_serving` meanwhile; or ``start``
        and ``stop`` it by hand.

        For a request and its wait: a reply that comes before the thread waits for it
        then wakes nobody else. Keep the block to the request and the wait: the
        connections are served only while the thread waits, and nothing in between may
        wait for another thread (such as user code pickling an argument).
        """
        return Serving(self)

    @property
    def stand_in(self) -> Optional[int]:
        """The ident of the thread serving in place of the server thread, if one is."""
        return self._stand_in

    def take_over(self) -> bool:
        """Take the connections' selector from the server thread, which sleeps on;
        whether this thread did (for `Serving`, which gives it back)."""
        if (self._outer is None or self._stopping
                or held_here(self.lock)
                or threading.current_thread() is self._thread
                or not self._serving.acquire(blocking=False)):
            return False
        with self.lock:
            if self._stopping:
                self._serving.release()
                return False
            self._outer.unregister(self._sel.fileno())
            self._stand_in = threading.get_ident()
        return True

    def hand_back(self) -> None:
        """Give the connections back to the server thread (after `take_over`)."""
        with self.lock:
            # What arrived while we served (a peer's next request, the other results of a
            # map) is cheaper to handle here than by waking the server thread for it.
            self._handle(self._sel.select(0))
            self._stand_in = None
            if not self._stopping and self._outer is not None:
                # Level-triggered: what arrived meanwhile wakes the server thread.
                self._outer.register(self._sel.fileno(), select.EPOLLIN)
        self._serving.release()


class Servable(Protocol):
    """What `Serving` needs of a server (a `fiber.transport.server.Server`, which
    imports this module): a caller about to wait takes its connections over."""

    @property
    def stand_in(self) -> Optional[int]:
        """The server's `StandIn`, through which a waiting caller serves."""

    def take_over(self) -> bool:
        """Called by a caller about to wait for a reply: whether it now serves the
        server's connections in place of the server's thread (False: another caller
        already does, or the server is closing)."""

    def hand_back(self) -> None:
        """Called once that caller's wait is over: the server's thread serves again."""


class Serving:
    """The context manager of `Server.serving` (a class: a generator-based one
    costs 2.5 us, several times a round trip)."""

    __slots__ = ("server", "took")

    def __init__(self, server: Servable) -> None:
        self.server = server
        self.took = False

    def start(self) -> bool:
        """Serve from now on (if this thread can); whether it does."""
        server = self.server
        if self.took or server.stand_in == threading.get_ident():
            return True  # already (or an enclosing block serves)
        self.took = server.take_over()
        return self.took

    def stop(self) -> None:
        """Give the connections back to the server thread (if taken by ``start``)."""
        if self.took:
            self.took = False
            self.server.hand_back()

    def __enter__(self) -> bool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def held_here(lock: Any) -> bool:
    """Whether this thread holds the RLock ``lock`` (whose ``acquire`` succeeds again in
    the thread that holds it, so it cannot tell). CPython's RLock has no public test of
    it: its ``_is_owned``, which every version we support has (False without it)."""
    owned = getattr(lock, "_is_owned", None)  # noqa: SLF001 - RLock has no public test
    return bool(owned()) if callable(owned) else False
