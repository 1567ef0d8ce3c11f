"""Messages a client sent without a reply (a ``Queue.put``, a ``Pipe.send``) that its TCP
connection's reset lost, sent again on the next connection to the same server, past what
the server says it read: each arrives once, in order. The protocol: docs/contributing/resets.md,
"Resend"."""

from __future__ import annotations

import collections
import socket
import struct
import sys
import threading
from typing import Any, Callable, Deque, List, NamedTuple, Optional, Sequence, Tuple

from .._process_state import here
from .operations import Service, handles, reply_of
from .peers import Peer
from .serialization import Frame

__all__ = ["SentLog", "Orphans", "orphan", "forget_in_child", "ALWAYS", "has_orphans",
           "take_orphans", "send_orphans",
           "deliver_orphans",
           "say_undelivered", "bytes_acked", "RESEND_SERVICE", "EndedPeers", "ResendOps",
           "CountOf", "Counted"]

#: The service every server has for it (a name no registered service can take).
RESEND_SERVICE = b"\x00resend"


class ResendOps:
    """The operations of `EndedPeers`."""

    COUNT = b"count"  # [old peer id] -> ok [messages it brought] | unknown
    SYNC = b"sync"  # [] -> ok, once the messages before it on its connection were served


class CountOf(NamedTuple):
    """``count``: the ended connection (its peer id at the server, u64 little-endian)
    whose messages the server is asked to count."""

    peer_id: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> CountOf:
        return cls(_u64(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.peer_id.to_bytes(8, "little")]


class Counted(NamedTuple):
    """The ``ok`` answer to a `CountOf`: how many messages that connection brought."""

    messages: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Counted:
        return cls(_u64(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.messages.to_bytes(8, "little")]


def _u64(frame: Frame) -> int:
    """A u64 little-endian frame (what ``to_bytes(8, "little")`` wrote)."""
    if len(frame) != 8:
        raise ValueError(f"a count of 8 bytes, not {len(frame)}")
    return int.from_bytes(frame, "little")


#: Orphans of one ended connection: its peer id at the server, and its messages as
#: (index among the messages written on it after the handshake, service, op, frames).
Orphans = Tuple[int, List[Tuple[int, bytes, bytes, Sequence[Frame]]]]
_CHECK = 64
_CHECK_BYTES = 4 << 20
#: Where ``tcpi_bytes_acked`` (a u64) sits in Linux's ``struct tcp_info`` (since 4.1).
_ACKED_AT = 120
_ACKED = struct.Struct("<Q")
_ENDED_KEPT = 4096
#: An orphan's index past any count: sent on the next connection whatever the old one
#: delivered (a lease's ``settle``: fiber.queues._lending), and not one of the program's
#: messages said lost when no connection can take it.
ALWAYS = 1 << 62


def bytes_acked(sock: socket.socket) -> Optional[int]:
    """The data bytes of ``sock`` its peer's kernel acknowledged; None where the kernel
    does not say (not Linux, or a kernel before 4.1)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, getattr(socket, "TCP_INFO", 11), 256)
    except (OSError, ValueError):
        return None
    if len(info) < _ACKED_AT + 8:
        return None
    acked: int = _ACKED.unpack_from(info, _ACKED_AT)[0]
    return max(0, acked - 1)  # the SYN counts one


class SentLog:
    """What one TCP client wrote, and its no-reply messages that its server's kernel may
    not have acknowledged yet. Written by the thread that sends (a lease's senders take
    a lock of their own), ended by whichever thread finds the connection lost: its own
    lock orders the two."""

    __slots__ = ("messages", "nbytes", "counting", "kept", "_kept_bytes", "_lock", "_ended",
                 "_address", "_peer_id")

    def __init__(self) -> None:
        self.messages = 0  # written since the handshake (what the server counts)
        self.nbytes = 0  # every byte written, the handshake's too (what the kernel counts)
        self.counting = False  # set once the handshake is done
        #: (end offset, size, index, service, op, frames) of each no-reply message kept
        self.kept: Deque[Tuple[int, int, int, bytes, bytes, Sequence[Frame]]] = \
            collections.deque()
        self._kept_bytes = 0
        self._lock = threading.Lock()
        self._ended = False
        self._address = ""
        self._peer_id = 0

    @staticmethod
    def for_socket(sock: socket.socket) -> Optional[SentLog]:
        """A log for ``sock`` (connected) if a link may reset it and the kernel says what
        arrived."""
        if sock.family == socket.AF_UNIX or bytes_acked(sock) is None:
            return None
        return SentLog()

    def wrote(self, nbytes: int) -> None:
        self.nbytes += nbytes
        if self.counting:
            self.messages += 1

    def keep(self, nbytes: int, sock: socket.socket, service: bytes, op: bytes,
             frames: Sequence[Frame]) -> None:
        """The no-reply message just written (`wrote` counted it) is kept; if its
        connection was found lost meanwhile, it is an orphan at once."""
        entry = (self.nbytes, nbytes, self.messages - 1, service, op, frames)
        with self._lock:
            if self._ended:
                orphan(self._address, (self._peer_id, [entry[2:]]))
                return
            self.kept.append(entry)
            self._kept_bytes += nbytes
            if len(self.kept) >= _CHECK or self._kept_bytes >= _CHECK_BYTES:
                self._drop_acknowledged(sock)

    def _drop_acknowledged(self, sock: socket.socket) -> None:
        """(under the lock)"""
        acked = bytes_acked(sock)
        kept = self.kept
        while acked is not None and kept and kept[0][0] <= acked:
            self._kept_bytes -= kept.popleft()[1]

    def lost(self, sock: socket.socket, address: str, peer_id: int) -> None:
        """The connection (``sock``, peer ``peer_id`` of the server at ``address``)
        failed: the kept messages the kernel does not know to have arrived are orphans.
        If it wrote anything, the next connection asks the server for its count even
        with none: the server then reads what the old one still holds first (in order)."""
        with self._lock:  # filed under it: another thread that finds the connection
            if self._ended:  # lost returns after them (a lease's settle follows its acks)
                return
            self._ended, self._address, self._peer_id = True, address, peer_id
            self._drop_acknowledged(sock)
            kept = [entry[2:] for entry in self.kept]
            self.kept.clear()
            if kept or self.messages:
                orphan(address, (peer_id, kept))


# The orphans by address, their lock, and the lock a new connection to an address holds
# while it sends them: in ``here.transport`` (``orphans``, ``resend_lock``,
# ``orphans_sending``).


def forget_in_child() -> None:
    """In a forked child: the parent's orphans are the parent's to deliver."""
    state = here.transport
    state.resend_lock = threading.Lock()
    state.orphans.clear()
    state.orphans_sending = collections.defaultdict(threading.Lock)


def orphan(address: str, orphans: Orphans) -> None:
    state = here.transport
    with state.resend_lock:
        state.orphans.setdefault(address, []).append(orphans)


def send_orphans(client: Any, address: str) -> None:
    """First on a new connection (``client``) to ``address``: of each ended connection's
    orphans, those its server did not get, in their order.

    Raises:
        ConnectionLost, TimeoutError: as the client's calls (what was not sent yet is
        kept for the next connection, ahead of the rest).
    """
    state = here.transport
    with state.resend_lock:
        sending = state.orphans_sending[address]
    with sending:
        pending = take_orphans(address)
        if not pending:
            return
        while pending:
            old, messages = pending[0]
            sent = 0
            try:
                status, payload = client.request(RESEND_SERVICE, ResendOps.COUNT,
                                                 CountOf(old).frames(), timeout=30.0)
                got = ALWAYS
                if status == b"ok":
                    got = reply_of(Counted, payload).messages
                elif (counted := _counted(messages)):
                    say_undelivered(address, counted, "the server no longer knows how "
                                    "many of them it got")
                for index, service, op, frames in messages:
                    if index >= got:
                        client.send(service, op, frames)
                    sent += 1
            except BaseException:
                _put_back(address, client.peer_id, [(old, messages[sent:]), *pending[1:]])
                raise
            pending.pop(0)
        # served before another connection's messages can be, so that orphans taken here
        # keep their order with those filed after (a lease's settle behind its acks)
        client.request(RESEND_SERVICE, ResendOps.SYNC, [], timeout=30.0)


def _put_back(address: str, failed: int, rest: List[Orphans]) -> None:
    """A resend failed on connection ``failed`` (its own orphans, what it resent, were
    filed last): the order is what it resent, then ``rest``, then anything newer."""
    state = here.transport
    with state.resend_lock:
        queue = state.orphans.setdefault(address, [])
        mine = [batch for batch in queue if batch[0] == failed]
        others = [batch for batch in queue if batch[0] != failed]
        queue[:] = mine + rest + others


def has_orphans(address: str) -> bool:
    """Whether messages to ``address`` wait for a new connection to it."""
    state = here.transport
    with state.resend_lock:
        return bool(state.orphans.get(address))


def take_orphans(address: str) -> List[Orphans]:
    """The lost messages to send first on a new connection to ``address``."""
    state = here.transport
    if not state.orphans:
        return []
    with state.resend_lock:
        return state.orphans.pop(address, [])


def deliver_orphans(connect: Callable[[str], Any]) -> None:
    """At the process's exit: a last connection to each server that has orphans
    (``connect(address)`` sends them first), or their loss said."""
    state = here.transport
    with state.resend_lock:
        addresses = list(state.orphans)
    for address in addresses:
        try:
            connect(address).close()
        except Exception as e:
            lost = sum(_counted(messages) for _, messages in take_orphans(address))
            if lost:  # (a connection that lost none still asks its count: see SentLog.lost)
                say_undelivered(address, lost, str(e))


def _counted(messages: Sequence[Tuple[int, bytes, bytes, Sequence[Frame]]]) -> int:
    """How many of an ended connection's orphans are the program's messages (not
    `ALWAYS` ones)."""
    return sum(1 for m in messages if m[0] != ALWAYS)


def say_undelivered(address: str, count: int, why: str) -> None:
    """The last word on orphans no connection could take."""
    try:
        sys.stderr.write(f"fiber: {count} message(s) to {address} (puts, sends: calls that "
                         f"had returned) were lost when its connection was reset, and "
                         f"could not be sent again: {why}\n")
    except (OSError, ValueError):
        pass


class EndedPeers(Service):
    """The server's side: how many messages each recently ended connection brought.
    A service of every server (`RESEND_SERVICE`), run under its lock like the others."""

    protocol = "resend"

    def __init__(self, end_peer: Callable[[int], None]) -> None:
        self._end_peer = end_peer  # ends a live connection, after reading it
        self._counts: collections.OrderedDict[int, int] = collections.OrderedDict()

    def ended(self, peer: Peer) -> None:
        self._counts[peer.peer_id] = peer.received  # 0 too: then every one went again
        if len(self._counts) > _ENDED_KEPT:
            self._counts.popitem(last=False)

    @handles(ResendOps.COUNT, CountOf)
    def count(self, server: Any, peer: Peer, req_id: bytes, msg: CountOf) -> None:
        """Answered ``ok`` and how many messages connection ``msg.peer_id`` brought
        (`Counted`), once it has ended; ``unknown`` if this server does not know (it
        forgot, or it never served that connection)."""
        old = msg.peer_id
        self._end_peer(old)
        count = self._counts.get(old)  # kept: a client may ask again (see send_orphans)
        if count is None:
            server.reply(peer, req_id, b"unknown")
        else:
            server.reply(peer, req_id, b"ok", Counted(count).frames())

    @handles(ResendOps.SYNC)
    def sync(self, server: Any, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """``[]``: answered once what came before it on this connection was served (a
        server serves a connection's messages in order)."""
        server.reply(peer, req_id, b"ok")
