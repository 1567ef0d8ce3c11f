"""The in-process side of a `Server`: a thread of the process that runs the server calls
its services directly (`LocalClient`), with no socket, and waits for a reply by serving
the server's connections itself (``Server.wait_serving``). `Channel` is what a caller
gets from ``get_client``: a `LocalClient` for this process's own server, a connection
(``fiber.transport.client.Client``) for any other."""

from __future__ import annotations

import itertools
import struct
import threading
from typing import Callable, List, NamedTuple, Optional, Protocol, Sequence, Tuple

from .._process_state import here
from .peers import LocalPeer, Peer
from .serialization import Frame
from .settings import SettingsSource
from .settings import defaults as _defaults

__all__ = ["Channel", "OwnServer", "LocalClient", "Reply", "LateReply", "Cancel", "spin_of",
           "register_local_server", "unregister_local_server", "local_server"]

Reply = Tuple[bytes, List[Frame]]
LateReply = Callable[[bytes, List[Frame]], None]


class Cancel(NamedTuple):
    """A service's cancel op (a ``withdraw``, see `Channel.request`): the id of the
    request that its caller gave up on, dropped if it still waits (a pipe set's ``any``
    wait, a queue's get, a pipe's recv, a lock's acquire, a barrier's wait): asked on the
    same connection (or thread of the server's process), or, with its ticket, asked first
    on one that a reset ended (`fiber.transport.receipts.names_wait`)."""

    req_id: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Cancel:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.req_id]


class Channel(Protocol):
    """What `get_client` gives: a `Client` (a connection) or a
    `LocalClient` (this process's own server, called directly)."""

    address: str
    lost: bool
    #: Whether a link may reset it (TCP): then a request asked again carries a ticket.
    may_reset: bool

    def request(self, service: bytes, op: bytes, frames: Sequence[Frame] = (),
                timeout: Optional[float] = None,
                on_late: Optional[LateReply] = None, ticket: bytes = b"",
                withdraw: bytes = b"") -> Reply:
        """Ask ``op`` of ``service`` and wait for its reply, ``(status, frames)``, at most
        ``timeout`` seconds. ``on_late`` gets a reply that comes after the wait gave up,
        and ``withdraw`` (an op of ``service``) then drops the request if it still waits;
        ``ticket`` (see `fiber.transport.receipts`) makes a request asked again after a
        reset be answered as it was, not served twice.

        Raises:
            TimeoutError: no reply within ``timeout``.
            ConnectionLost: the connection ended before the reply.
        """

    def send(self, service: bytes, op: bytes, frames: Sequence[Frame] = ()) -> None:
        """Send ``op`` to ``service`` without waiting (no reply is sent back)."""

    def start(self, service: bytes, op: bytes, frames: Sequence[Frame],
              on_reply: LateReply) -> bytes:
        """Ask ``op`` of ``service`` without waiting: ``on_reply(status, frames)`` is
        called with its reply, in the thread that reads it. Returns the request's id."""


class OwnServer(Protocol):
    """What a `LocalClient` uses of this process's own server (a
    `Server`, which imports this module)."""

    address: str
    lock: threading.RLock

    @property
    def alive(self) -> bool:
        """Whether the server still serves (its thread runs and it is not closing)."""

    def local_peer(self) -> LocalPeer:
        """The calling thread's peer: how the services see this process's own calls."""

    def dispatch(self, peer: Peer, name: bytes, op: bytes, req_id: bytes,
                 payload: List[Frame]) -> None:
        """Hand ``op`` of service ``name`` to its handler, as if ``peer`` had sent it
        (under the server's ``lock``)."""

    def wait_serving(self, done: Callable[[], bool], timeout: Optional[float],
                     wait: Callable[[Optional[float]], bool],
                     spin: Optional[Callable[[], float]] = None) -> bool:
        """Until ``done()`` or ``timeout``: serve the server's connections from this
        thread where it may (see `fiber.transport.serving`), else ``wait``; ``spin``
        says for how long to poll before sleeping. Returns ``done()``."""


class LocalClient:
    """Calls the services of this process's own server directly, under its lock."""

    lost = False
    may_reset = False  # a call, not a connection

    def __init__(self, server: OwnServer, settings: SettingsSource = _defaults) -> None:
        self.address = server.address
        self._server = server
        self._ids = itertools.count(1)
        self._spin = lambda: spin_of(settings)

    def request(self, service: bytes, op: bytes, frames: Sequence[Frame] = (),
                timeout: Optional[float] = None, on_late: Optional[LateReply] = None,
                ticket: bytes = b"", withdraw: bytes = b"") -> Reply:
        """As `fiber.transport.client.Client.request` (``ticket`` unused: a call in
        memory is never cut off). A late reply goes to ``on_late`` on the thread that
        answers, as soon as it is sent; ``withdraw`` is asked, as a connection's client
        asks it, when this call gives up (see `_withdraw`)."""
        server = self._server
        peer = server.local_peer()
        req_id = struct.pack("<Q", next(self._ids))
        payload = _own(frames)
        replies = peer.replies

        def wait(left: Optional[float]) -> bool:
            with server.lock:
                return peer.cond.wait_for(lambda: req_id in replies, left)

        with server.lock:
            server.dispatch(peer, service, op, req_id, payload)
        try:
            if not server.wait_serving(lambda: req_id in replies, timeout, wait, self._spin):
                raise TimeoutError(f"no reply from {service!r} within {timeout} s")
        except BaseException:
            with server.lock:
                got = replies.pop(req_id, None)
                if got is None and on_late is not None:
                    peer.late[req_id] = on_late
                elif got is not None and on_late is not None:
                    on_late(*got)  # answered just as we gave up: hand it back
                if withdraw and on_late is not None:
                    self._withdraw(peer, service, withdraw, req_id)
            raise
        return replies.pop(req_id)

    def _withdraw(self, peer: LocalPeer, service: bytes, op: bytes, req_id: bytes) -> None:
        """Ask ``service`` to drop request ``req_id``, which its caller gave up on, with
        ``op`` (under the server's lock, which the caller holds): as on a connection, it
        is asked whether or not the request was answered (a service may have counted an
        answered one: a barrier's last arrival, answered ``action``). Served at once, in
        memory: a request it did not drop was answered before, so no reply will come."""
        ask = struct.pack("<Q", next(self._ids))
        peer.late[ask] = _ignored  # its answer (``ok``) is taken here, not kept
        try:
            self._server.dispatch(peer, service, op, ask, Cancel(req_id).frames())
        except Exception:
            pass  # (best effort, as a connection's: the caller's exception is what it sees)
        finally:
            peer.late.pop(ask, None)
        peer.late.pop(req_id, None)

    def send(self, service: bytes, op: bytes, frames: Sequence[Frame] = ()) -> None:
        server = self._server
        payload = _own(frames)
        with server.lock:
            server.dispatch(server.local_peer(), service, op, b"", payload)

    def start(self, service: bytes, op: bytes, frames: Sequence[Frame],
              on_reply: LateReply) -> bytes:
        """As `Client.start`; ``on_reply`` is called under the server's lock, on
        whichever thread answers (this one, when the answer is immediate)."""
        server = self._server
        peer = server.local_peer()
        req_id = struct.pack("<Q", next(self._ids))
        payload = _own(frames)
        with server.lock:
            peer.late[req_id] = on_reply
            server.dispatch(peer, service, op, req_id, payload)
        return req_id


def _ignored(status: bytes, frames: List[Frame]) -> None:
    """The answer to a withdraw (see `LocalClient._withdraw`)."""


def spin_of(settings: SettingsSource) -> float:
    """Seconds a thread waiting for a reply may poll first (see fiber.transport.cpus)."""
    return float(settings().spin_us) * 1e-6


def _own(frames: Sequence[Frame]) -> List[Frame]:
    """Copies of the caller's buffers: it may change them once we return, and a queue
    keeps them. Large ones become writable bytearrays, handed on without another copy."""
    return [bytes(f) if memoryview(f).nbytes < 65536 else bytearray(f) for f in frames]


# This process's own servers, by address: ``here.transport.local_servers``.
# a forked child's calls go to its parent's servers through connections: its own are
# not started yet
here.after_fork_in_child(here.transport.local_servers.clear)


def register_local_server(server: OwnServer) -> None:
    """Route this process's calls to ``server`` through `LocalClient`."""
    here.transport.local_servers[server.address] = server


def unregister_local_server(server: OwnServer) -> None:
    here.transport.local_servers.pop(server.address, None)


def local_server(address: str) -> Optional[OwnServer]:
    """This process's own server at ``address`` (registered), or None."""
    return here.transport.local_servers.get(address)
