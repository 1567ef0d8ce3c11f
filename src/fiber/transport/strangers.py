"""Connections that never proved the program's secret, said on stderr as sshd says them:
one line per source host and minute, however many it opens.

A server closes a connection that sends something other than a handshake, sends more than
a handshake's bytes, fails the proof, stays silent past the handshake's deadline, or is
the oldest of too many waiting ones (see ``transport.server``). Each such close is a
stranger's (a port scanner, a program with another secret, an attack) or a peer's bug;
either way the operator wants to know, without a flood of lines from a flood of
connections.
"""

from __future__ import annotations

import sys
import time
from typing import Dict, List, Tuple

__all__ = ["Strangers", "WINDOW_S"]

#: Seconds between two lines about one source host.
WINDOW_S = 60.0
#: Source hosts remembered at most (a flood from many addresses stays bounded).
_MAX_SOURCES = 1024


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
