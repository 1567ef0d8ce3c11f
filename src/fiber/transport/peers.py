"""Who sends a server its requests: a *peer* is one authenticated connection, or one
thread of the server's own process calling its services directly (a
`LocalPeer`, to which a reply is delivered in memory); and a
`Connection`, the server's record of one socket (a peer once authenticated)."""

from __future__ import annotations

import operator
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from . import auth
from .framing import FrameReader, Outbox, Scratch
from .serialization import Frame
from .tls import TlsSocket

__all__ = ["Peer", "LocalPeer", "Connection", "traffic"]

#: A peer's connection; a connection's bytes written and read (see `traffic`).
_CONN = operator.attrgetter("conn")
_SENT = operator.attrgetter("outbox.nbytes")
_RECEIVED = operator.attrgetter("reader.nbytes")


def traffic(peers: Iterable[Peer]) -> Tuple[int, int]:
    """The bytes written to ``peers`` and read from them on their connections so far
    (also once they have ended; nothing for a thread of this process), added up.

    In two C loops, not a Python call a peer (a dashboard's poll adds up a 1,024-worker
    pool's every second). Under a pool running rounds it still costs ~0.8 ms: reading
    1,024 connections' counters from memory, not the calls."""
    conns = [conn for conn in map(_CONN, peers) if conn is not None]
    return sum(map(_SENT, conns)), sum(map(_RECEIVED, conns))

#: Bytes a message may have before its connection authenticated.
PREAUTH_LIMIT = 512


class Peer:
    """A client connection after it authenticated."""

    __slots__ = ("peer_id", "process_id", "anchor", "conn", "reset", "received")

    def __init__(self, peer_id: int, process_id: bytes, anchor: bool,
                 conn: Optional[Connection]) -> None:
        """``conn``: the server's record of the connection (None for a local peer)."""
        self.peer_id = peer_id
        self.process_id = process_id
        self.anchor = anchor
        self.conn = conn
        #: Its TCP connection ended in an error other than a timeout (a reset: a killed
        #: process with unread data, or a link's reset while both ends live), not a clean
        #: end: the process may still live and connect again (see `Service.peer_gone`).
        #: Never for a Unix socket: no link resets one.
        self.reset = False
        self.received = 0  # messages read from it (see fiber.transport._resend)

    @property
    def may_reset(self) -> bool:
        """Whether a link can reset its connection (TCP: not a Unix socket, nor a thread
        of the server's own process)."""
        return self.conn is not None and not self.conn.reader.unix


class LocalPeer(Peer):
    """A thread of this process calling services directly; replies wake it up."""

    __slots__ = ("replies", "late", "cond")

    def __init__(self, peer_id: int, process_id: bytes, lock: threading.RLock) -> None:
        super().__init__(peer_id, process_id, False, None)
        self.replies: Dict[bytes, Tuple[bytes, List[Any]]] = {}
        self.late: Dict[bytes, Callable[[bytes, List[Any]], None]] = {}
        self.cond = threading.Condition(lock)

    def deliver(self, req_id: bytes, status: bytes, frames: Sequence[Frame]) -> None:
        late = self.late.pop(req_id, None)
        if late is not None:
            late(status, list(frames))
            return
        self.replies[req_id] = (status, list(frames))
        self.cond.notify_all()


class Connection:
    """The server's record of one socket: what it read, what waits to be written, its
    handshake, and its peer once authenticated."""

    __slots__ = ("sock", "reader", "outbox", "handshake", "peer", "since", "writing",
                 "source", "broken", "tls", "__weakref__")

    def __init__(self, sock: socket.socket, scratch: Scratch) -> None:
        self.sock = sock
        unix = sock.family == socket.AF_UNIX
        #: Its socket is a `fiber.transport.tls.TlsSocket`, handshaken before anything
        #: else is read (see `Server._read`).
        self.tls = isinstance(sock, TlsSocket)
        self.reader = FrameReader(max_message=PREAUTH_LIMIT, unix=unix, scratch=scratch,
                                  tls=self.tls)
        self.outbox = Outbox(unix=unix, tls=self.tls)
        self.handshake = auth.ServerHandshake()
        self.peer: Optional[Peer] = None
        self.since = time.monotonic()
        self.writing = False
        self.source = ""  # the peer's host ("" for a Unix socket), for the strangers' log
        self.broken = False  # a write failed: it is read to its end, then closed

    def reset_peer(self) -> None:
        """Its peer's connection was reset (see `Peer.reset`), unless it is a Unix
        socket's, which no link resets."""
        if self.peer is not None:
            self.peer.reset = self.peer.may_reset
