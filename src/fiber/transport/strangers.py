"""Connections that have not proved the program's secret: kept few and briefly (`Door`),
and those closed said on stderr as sshd says them: one line per source host and minute,
however many it opens (`Strangers`).

A server closes a connection that sends something other than a handshake, sends more than
a handshake's bytes, fails the proof, stays silent past the handshake's deadline, or is
the oldest of too many waiting ones (see ``transport.server``). Each such close is a
stranger's (a port scanner, a program with another secret, an attack) or a peer's bug;
either way the operator wants to know, without a flood of lines from a flood of
connections.
"""

from __future__ import annotations

import collections
import sys
import time
import weakref
from typing import Callable, Dict, List, Tuple

from .peers import Connection

__all__ = ["Door", "Strangers", "WINDOW_S", "HANDSHAKE_TTL", "MAX_WAITING", "handshake_ttl"]

#: Seconds a connection has to authenticate, at least (see `handshake_ttl`).
HANDSHAKE_TTL = 30.0
#: Connections kept before they authenticate; past it the oldest is closed (a stranger
#: opening connections without end). Each worker of a pool opens one as it starts (and
#: one more at its first output): room for several thousand starting at once.
MAX_WAITING = 8192

#: Seconds between two lines about one source host.
WINDOW_S = 60.0
#: Source hosts remembered at most (a flood from many addresses stays bounded).
_MAX_SOURCES = 1024


def handshake_ttl(heartbeat_timeout: float) -> float:
    """Seconds an accepted connection has to authenticate: twice what its client gives its
    handshakes (`fiber.transport.client.connect_timeout`: the grace, ``heartbeat_timeout``,
    or 10 s if longer), `HANDSHAKE_TTL` at least. A peer on a slow link fails on its own
    side, with its own error, and is never closed here as a stranger while it waits."""
    return max(HANDSHAKE_TTL, 2.0 * heartbeat_timeout)


class Strangers:
    """The refused connections of one server, by source host (under the server's lock)."""

    def __init__(self, address: str) -> None:
        self._address = address
        #: host -> (when its last line was said, closes since then not said)
        self._sources: Dict[str, Tuple[float, int]] = {}
        #: Every line said (for tests), the newest last; a few are kept.
        self.said: List[str] = []

    def refused(self, source: str, why: str) -> None:
        """A connection from ``source`` (a host, or "" for this host's Unix socket) was
        closed before it authenticated, for ``why``."""
        now = time.monotonic()
        last, unsaid = self._sources.get(source, (-WINDOW_S, 0))
        if now - last < WINDOW_S:
            self._sources[source] = (last, unsaid + 1)
            return
        if len(self._sources) >= _MAX_SOURCES:
            self._forget(now)
        self._sources[source] = (now, 0)
        more = f" ({unsaid} more from it since the last line)" if unsaid else ""
        line = (f"fiber: {self._address} closed a connection from "
                f"{source or 'this host (unix socket)'} that did not authenticate: {why}"
                f"{more}; lines about this host are said once a minute at most")
        self.said = self.said[-15:] + [line]
        try:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()
        except (OSError, ValueError, AttributeError):
            pass

    def _forget(self, now: float) -> None:
        """Drop the sources not heard from within the window, or else the oldest half."""
        old = [s for s, (t, _) in self._sources.items() if now - t >= WINDOW_S]
        if not old:
            old = sorted(self._sources, key=lambda s: self._sources[s][0])
            old = old[:len(old) // 2]
        for source in old:
            del self._sources[source]


class Door:
    """The connections of one server that have not authenticated yet (under the server's
    lock): at most `MAX_WAITING`, the oldest closed first, each for ``ttl`` seconds at
    most; every one closed is counted (``dropped``) and said (`Strangers`)."""

    def __init__(self, address: str, close: Callable[[Connection], None],
                 ttl: float = HANDSHAKE_TTL) -> None:
        """``close``: how the server closes a connection; ``ttl``: `handshake_ttl`."""
        self.ttl = ttl
        self.waiting: collections.OrderedDict[int, Connection] = collections.OrderedDict()
        self.dropped = 0
        self.strangers = Strangers(address)
        self._close = close

    def arrived(self, conn: Connection) -> Callable[[], None]:
        """``conn`` was accepted; returns what to call ``ttl`` s later (it holds
        a weak reference: a connection closed before must not stay in memory till then)."""
        self.waiting[id(conn)] = conn
        while len(self.waiting) > MAX_WAITING:
            _, oldest = self.waiting.popitem(last=False)
            self.refuse(oldest, f"over {MAX_WAITING} connections wait to authenticate")
        ref = weakref.ref(conn)

        def expire() -> None:
            late = ref()
            if late is not None and late.peer is None and late.sock.fileno() >= 0:
                self.refuse(late, f"no handshake within {self.ttl:.0f} s")
        return expire

    def left(self, conn: Connection) -> None:
        """``conn`` authenticated, or was closed."""
        self.waiting.pop(id(conn), None)

    def refuse(self, conn: Connection, why: str) -> None:
        """Close ``conn``, which has not authenticated, and say so."""
        self.dropped += 1
        self.strangers.refused(conn.source, why)
        self._close(conn)
