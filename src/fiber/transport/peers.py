"""Who sends a server its requests: a *peer* is one authenticated connection, or one
thread of the server's own process calling its services directly (a
:class:`LocalPeer`, to which a reply is delivered in memory)."""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Sequence, Tuple

__all__ = ["Peer", "LocalPeer"]


class Peer:
    """A client connection after it authenticated."""

    __slots__ = ("peer_id", "process_id", "anchor", "conn")

    def __init__(self, peer_id: int, process_id: bytes, anchor: bool, conn: Any) -> None:
        """``conn``: the server's record of the connection (None for a local peer)."""
        self.peer_id = peer_id
        self.process_id = process_id
        self.anchor = anchor
        self.conn = conn


class LocalPeer(Peer):
    """A thread of this process calling services directly; replies wake it up."""

    __slots__ = ("replies", "late", "cond")

    def __init__(self, peer_id: int, process_id: bytes, lock: threading.RLock) -> None:
        super().__init__(peer_id, process_id, False, None)
        self.replies: Dict[bytes, Tuple[bytes, List[Any]]] = {}
        self.late: Dict[bytes, Callable[[bytes, List[Any]], None]] = {}
        self.cond = threading.Condition(lock)

    def deliver(self, req_id: bytes, status: bytes, frames: Sequence[Any]) -> None:
        late = self.late.pop(req_id, None)
        if late is not None:
            late(status, list(frames))
            return
        self.replies[req_id] = (status, list(frames))
        self.cond.notify_all()
