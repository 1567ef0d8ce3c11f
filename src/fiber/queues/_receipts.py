"""A ``get`` whose reply a connection's reset lost is asked again, and answered with the
same item: no item is lost between the queue's hub and a consumer elsewhere (issue 30).

    consumer (a thread)                                 the queue's hub
    get() ── [get, wait, ticket] ─────────────────────▶ hands out an item, and keeps it
                                                        as the last of the ticket's getter
          ✕ the reply lost in a reset (ConnectionLost)
    get() ── [get, wait, the same ticket] (new conn.) ─▶ the same item again
    next get() ── [get, wait, next ticket] ───────────▶ the last one arrived: forgotten

A ticket is its getter's key (a thread of a process, for any queue) and a count. A
getter asks one ``get`` at a time, so a newer ticket says the last item arrived. The hub
keeps the last item of getters on TCP connections only (a Unix socket is never reset),
until the getter's next ``get``, or its connection's end: at once for a clean end (its
process ended or closed it), after ``REANCHOR_WAIT_S`` for a reset (the time it has to
ask again). Items lent ahead (fiber.queues._lending) are acknowledged as taken, not
asked again.
"""

from __future__ import annotations

import os
import struct
import threading
from typing import Any, Dict, List, Optional, Tuple

from ..transport.server import REANCHOR_WAIT_S, Peer, Server

__all__ = ["ticket", "Receipts"]

_TICKET = struct.Struct("<8sQ")
_local = threading.local()


def ticket() -> bytes:
    """The next ``get`` ticket of this thread."""
    key = getattr(_local, "key", None)
    if key is None or _local.pid != os.getpid():
        _local.key, _local.pid, _local.count = os.urandom(8), os.getpid(), 0
    _local.count += 1
    return _TICKET.pack(_local.key, _local.count)


class Receipts:
    """The last item handed to each getter on a TCP connection (under the hub's lock)."""

    def __init__(self) -> None:
        #: getter key -> (ticket, status, frames, the connection it was sent on)
        self._last: Dict[bytes, Tuple[bytes, bytes, List[Any], Peer]] = {}

    def again(self, asked: bytes, peer: Peer) -> Optional[Tuple[bytes, List[Any]]]:
        """The reply to send ``peer`` again if ``asked`` (a ticket, or b"": none) was
        answered already; a newer ticket forgets its getter's last item (it arrived)."""
        if not asked:
            return None
        key = asked[:8]
        last = self._last.get(key)
        if last is None:
            return None
        if last[0] != asked:
            del self._last[key]
            return None
        self._last[key] = (asked, last[1], last[2], peer)  # kept for this connection now
        return last[1], last[2]

    def handed(self, asked: bytes, status: bytes, frames: List[Any], peer: Peer) -> None:
        """``frames`` were sent to ``peer`` as the answer to ticket ``asked``."""
        if asked and peer.may_reset:
            self._last[asked[:8]] = (asked, status, frames, peer)

    def peer_gone(self, server: Server, peer: Peer) -> None:
        """``peer``'s connection ended: its getters' last items are forgotten, at once or,
        after a reset, once they had the time to ask again."""
        keys = [key for key, last in self._last.items() if last[3] is peer]
        if not keys:
            return
        if not peer.reset:
            for key in keys:
                del self._last[key]
            return
        server.call_later(REANCHOR_WAIT_S, lambda: self._forget(keys, peer))

    def _forget(self, keys: List[bytes], peer: Peer) -> None:
        for key in keys:
            last = self._last.get(key)
            if last is not None and last[3] is peer:
                del self._last[key]
