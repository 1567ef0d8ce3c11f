"""An authenticated message server: one listening TCP socket (and an abstract Unix one)
and one thread; services run under ``Server.lock``. The design, with its diagrams:
docs/contributing/architecture.md, "The transport"."""

from __future__ import annotations

import collections
import errno
import functools
import itertools
import logging
import os
import select
import selectors
import socket
import sys
import threading
import traceback
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple, Type, TypeVar

from ..errors import TransportError
from . import tls
from ._resend import RESEND_SERVICE, EndedPeers
from .admission import LISTENER, Admission
from .framing import ProtocolError, new_scratch
from .operations import Service
from .peers import Connection, LocalPeer, Peer
from .peers import traffic as peers_traffic
from .receipts import REANCHOR_WAIT_S, SKIP, TICKET_BYTES, Receipts
from .serialization import Frame, dumps
from .serving import Events, Serving, StandIn
from .sockets import listen, readable, reset_on_close, server_id
from .strangers import Door, handshake_ttl
from .timers import Timer, Timers

__all__ = ["Server", "Service", "Peer", "LocalPeer", "Timer", "Serving"]

_log = logging.getLogger("fiber.transport")

S = TypeVar("S", bound=Service)

#: Seconds after its backend reported a job's end that the process's connections still
#: open (their end lost: a host cut off, a pod's network gone first) are closed, and a
#: reset one's wait for it to anchor again ends (see `Server.job_ended`). What it sent
#: before it died has had the report's delay and this long to arrive.
JOB_END_SETTLE_S = 1.0


def _pipe() -> Tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


_WAKE = object()
_NUDGE = object()


def _abortive(conn: Connection) -> None:
    """Make ``conn``'s close a reset (see `sockets.reset_on_close`): its peer's lifeline
    is made again, not ended."""
    reset_on_close(conn.sock)


class Server(StandIn, Admission):
    """A TCP listener on ``host`` (``port``, 0: a free one) served by one thread."""

    def __init__(self, host: str, heartbeat_s: float = 1.0, timeout_s: float = 30.0,
                 name: str = "fiber-server", port: int = 0) -> None:
        try:
            self._listeners, self.address = listen(host, port)
        except OSError as e:
            raise TransportError(f"cannot listen on {host!r} port {port}: {e}",
                                 f"tcp://{host}:{port}") from e
        self._heartbeat = (heartbeat_s, timeout_s)
        #: Guards every service and every socket write; reentrant for nested calls.
        self.lock = threading.RLock()
        self._sel = selectors.DefaultSelector()  # listeners and connections
        for listener in self._listeners:
            listener.setblocking(False)
            self._sel.register(listener, selectors.EVENT_READ, LISTENER)
        self._wake_r, self._wake_w = _pipe()
        self._nudge_r, self._nudge_w = _pipe()
        self._sel.register(self._nudge_r, selectors.EVENT_READ, _NUDGE)
        # The server thread sleeps on this one, a bare epoll (taking the connections'
        # selector out and back costs 2.5 us, not 10 through the selectors module).
        # Without epoll the server thread sleeps on the connections' selector itself
        # and no other thread serves.
        self._outer: Optional[select.epoll] = None
        if isinstance(self._sel, getattr(selectors, "EpollSelector", ())):
            self._outer = select.epoll()
            self._outer.register(self._wake_r, select.EPOLLIN)
            self._outer.register(self._sel.fileno(), select.EPOLLIN)
        else:
            self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        #: Held by a thread that serves the connections in place of the server thread.
        self._serving = threading.Lock()
        self._stand_in: Optional[int] = None  # that thread's ident, under the lock
        self._calls: Deque[Callable[[], None]] = collections.deque()
        self._timers = Timers()
        self._peer_ids = itertools.count(1)
        self._services: Dict[bytes, Service] = {}
        self._conns: Dict[int, Connection] = {}
        self._scratch = new_scratch()  # the connections' read buffer: read under the lock
        self._id = server_id(self.address).encode()  # told to clients (see auth)
        self._anchors: Dict[bytes, int] = collections.Counter()
        self._open_of: Dict[bytes, int] = collections.Counter()  # each process's peers
        #: Processes whose anchor timed out (``heartbeat_timeout`` with no answer from
        #: their host), until a service asks (`went_silent`); bounded.
        self._silent: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        #: Processes the services were told are gone (each once; bounded).
        self._gone: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._local = threading.local()
        #: Connections not authenticated yet, and those closed for it (for tests, logs).
        self.door = Door(self.address, self._close_conn, handshake_ttl(timeout_s))
        #: How many messages each ended connection brought (see _resend).
        # the client that asks what an old connection brought lives: its end is a reset
        self.ended_peers = EndedPeers(functools.partial(self.end_peer, abort=True))
        self._services[RESEND_SERVICE] = self.ended_peers
        #: The last request of each caller of an ``answers_again`` service (see receipts).
        self.receipts = Receipts()
        #: Where the server's INFO lines go (the program's fiber log, once set: see
        #: fiber._core._runtime; this package does not know the config).
        self.say: Callable[..., None] = _log.info
        self._said_out_of_files = False
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # -- for any thread ------------------------------------------------------------------

    def _wake(self) -> None:
        wake_w = self._wake_w
        if wake_w < 0:
            return  # stopped: its pipe is closed
        try:
            os.write(wake_w, b"x")
        except (BlockingIOError, OSError):
            pass  # already awake, or closing

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the server thread, under the lock."""
        self._calls.append(fn)
        self._wake()

    def register(self, name: bytes, service: Service) -> None:
        if not name or name[:1] == b"\x00":
            raise ValueError(f"bad service name {name!r}")
        with self.lock:
            self._services[name] = service

    def ensure(self, name: bytes, kind: Type[S], make: Optional[Callable[[], S]] = None) -> S:
        """The service ``name``, made (``make()``, else ``kind()``) and registered by its first
        caller (a hub keeps one of each); ``TypeError`` if the one registered is no ``kind``."""
        with self.lock:
            service = self._services.get(name)
            if service is None:
                made = make() if make is not None else kind()
                self.register(name, made)
                return made
        if not isinstance(service, kind):
            raise TypeError(f"service {name!r} is {type(service).__name__}, not "
                            f"{kind.__name__}")
        return service

    def unregister(self, name: bytes) -> None:
        with self.lock:
            self._services.pop(name, None)

    def adopt(self, sock: socket.socket, process_id: bytes) -> None:
        """Serve ``sock`` as the anchor of process ``process_id``: one end of a socket
        pair whose other end that process (a job of this host) is handed at its start.
        Nobody else can hold that end, so it skips the handshake; its end is the
        process's end, as for an anchor that connected.

        Raises:
            TransportError: the server has stopped (``sock`` is closed).
        """
        sock.setblocking(False)
        with self.lock:
            if self._stopping:
                sock.close()
                raise TransportError("the server has stopped", self.address)
            conn = Connection(sock, self._scratch)
            self._admit(conn, process_id, anchor=True)
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def job_ended(self, process_id: bytes) -> None:
        """Process ``process_id``'s job has ended, as its backend says (any thread).

        The end of its connections is how the services learn it (a lock's holder, a
        queue's consumer...), but that end may never come: a host cut off, or a pod whose
        network went before its process, sends no FIN, and a reset connection is waited
        for in case its process lives. The backend's word settles it:
        ``JOB_END_SETTLE_S`` later, what is still open of it is read and closed, and the
        process is gone."""
        self.call_soon(functools.partial(self._settle_job_end, process_id))

    def _settle_job_end(self, process_id: bytes) -> None:
        self.call_later(JOB_END_SETTLE_S, functools.partial(self._job_ended, process_id))

    def _job_ended(self, process_id: bytes) -> None:
        self._close_all_of(process_id)
        self._process_gone(process_id)  # (a reset's wait ends too; at most once)

    def _close_all_of(self, process_id: bytes) -> None:
        """Read and close ``process_id``'s connections (its callers, if it lives, ask again)."""
        if process_id not in self._open_of:
            return  # (none: the usual end, without a walk through every connection)
        for conn in list(self._conns.values()):
            if conn.peer is not None and conn.peer.process_id == process_id:
                conn.peer.reset = False
                self._drain_close(conn)

    def watch(self, fd: int, on_readable: Callable[[], None]) -> None:
        """Call ``on_readable()`` whenever ``fd`` is readable, under the lock, on the
        thread that serves, until `unwatch`: a pipe that this process drains (a
        local job's output) is read in the same loop, and order, as its messages."""
        with self.lock:
            self._sel.register(fd, selectors.EVENT_READ, on_readable)

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (before it is closed); nothing if it is not watched."""
        with self.lock:
            try:
                self._sel.unregister(fd)
            except (KeyError, ValueError, OSError):
                pass

    def service(self, name: bytes) -> Optional[Service]:
        """The service registered as ``name``, if any."""
        return self._services.get(name)

    def local_peer(self) -> LocalPeer:
        """The calling thread's peer for direct calls (see `LocalClient`)."""
        peer = getattr(self._local, "peer", None)
        if peer is None:
            from .client import process_id

            peer = self._local.peer = LocalPeer(next(self._peer_ids), process_id(), self.lock)
        return peer

    def nudge(self) -> None:
        """Wake the thread serving in place of the server thread, unless it is the caller:
        what it waits for may have been done by another thread (called after such a change)."""
        ident = self._stand_in
        nudge_w = self._nudge_w
        if ident is not None and ident != threading.get_ident() and nudge_w >= 0:
            try:
                os.write(nudge_w, b"x")
            except (BlockingIOError, OSError):
                pass

    def close(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        self._wake()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stopping

    # -- for services (under the lock) ---------------------------------------------------

    def reply(self, peer: Peer, req_id: bytes, status: bytes,
              frames: Sequence[Frame] = ()) -> bool:
        """Send a reply; False when the peer is gone (and will not ask for it again:
        see `fiber.transport.receipts`)."""
        kept = False
        if len(req_id) == TICKET_BYTES and self.receipts:  # (see dispatch)
            peer, kept = self.receipts.answered(req_id, status, list(frames), peer)
        if isinstance(peer, LocalPeer):
            peer.deliver(req_id, status, frames)
            self.nudge()
            return True
        return self.send(peer, [req_id, status, *frames]) or kept

    def send(self, peer: Peer, frames: Sequence[Frame]) -> bool:
        """Send a message to a remote peer; False when it is gone."""
        conn = peer.conn
        if conn is None or conn.peer is not peer:
            return False
        self._flush(conn, frames)
        return True

    def reply_value(self, peer: Peer, req_id: bytes, value: object) -> bool:
        return self.reply(peer, req_id, b"ok", dumps(value))

    def reply_error(self, peer: Peer, req_id: bytes, exc: BaseException) -> bool:
        from .remote import pack_exception

        return self.reply(peer, req_id, b"err", dumps(pack_exception(exc)))

    #: The bytes written to peers and read from them (`fiber.transport.peers.traffic`).
    traffic = staticmethod(peers_traffic)

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        timer = self._timers.add(delay, fn)
        if threading.current_thread() is not self._thread:
            self._wake()
        return timer

    def went_silent(self, process_id: bytes) -> bool:
        """Whether the process just gone (`Service.process_gone`) was lost because its
        host stopped answering, not because its connection closed."""
        if process_id not in self._silent:
            return False
        del self._silent[process_id]
        return True

    def process_alive(self, process_id: bytes) -> bool:
        return self._anchors.get(process_id, 0) > 0

    def dispatch(self, peer: Peer, name: bytes, op: bytes, req_id: bytes,
                 payload: List[Frame]) -> None:
        """Hand a request to its service (under the lock); errors become replies."""
        service = self._services.get(name)
        # asked again after a reset: the kept answer, even if its object was dropped since
        if (len(req_id) == TICKET_BYTES and peer.may_reset
                and (service is None or service.answers_again)):
            again = self.receipts.again(req_id, peer)
            if again is not None:
                self.say("a request asked again after a connection's reset: %s", "answered "
                         "again" if again is not SKIP else "its answer goes to the new one")
                if again is not SKIP:
                    self.reply(peer, req_id, *again)
                return
            if service is not None:
                self.receipts.serving(req_id, peer)
        if service is None:
            if req_id:
                self.reply_error(peer, req_id, LookupError(
                    f"no fiber object {name.decode(errors='replace')!r} here (closed?)"))
            return
        try:
            service.handle(self, peer, op, req_id, payload)
        except Exception as e:  # a bad request must not kill the server thread
            if req_id:
                self.reply_error(peer, req_id, e)
            else:
                traceback.print_exc()

    def end_peer(self, peer_id: int, abort: bool = False) -> None:
        """End the connection of peer ``peer_id`` if it is still open, after reading
        what it has brought, as reset (services learn it as ``peer.reset``): its client
        says, on a new connection, that it was reset (under the lock). ``abort``: with
        a TCP reset (`_abortive`), for a process that lives (it connected again) and
        may still watch that connection as its lifeline."""
        for conn in list(self._conns.values()):
            if conn.peer is not None and conn.peer.peer_id == peer_id:
                conn.reset_peer()
                if abort:
                    _abortive(conn)
                self._drain_close(conn)
                return

    def _drain_close(self, conn: Connection) -> None:
        """Close ``conn`` once what its socket holds is read: every message its client
        wrote before the connection failed is served (and counted, see _resend)."""
        for _ in range(10000):  # at most its receive buffer
            if conn.sock.fileno() < 0 or not readable([conn.sock], 0):
                break
            self._read(conn)
        self._close_conn(conn)

    # -- the loop ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stopping:
                events = self._sleep(self._timers.timeout())
                with self.lock:
                    if events is None:  # unless another thread serves the connections
                        events = self._sel.select(0) if self._stand_in is None else []
                    self._handle(events)
                    while self._calls:
                        self._guarded(self._calls.popleft())
                    for timer in self._timers.due():
                        self._guarded(timer.fn)
        finally:
            self._stopping = True  # also when the loop failed: no thread takes over again
            self.nudge()
            with self._serving:  # a thread serving in our place has left the selector
                with self.lock:
                    for conn in list(self._conns.values()):
                        self._close_conn(conn, notify=False)
                    if self._outer is not None:
                        self._outer.close()
                    self._sel.close()
                    for listener in self._listeners:
                        listener.close()
                    # -1 first: a late wake or nudge from another thread must not write
                    # to these numbers once a later pipe or file of the program has one
                    fds = (self._wake_r, self._wake_w, self._nudge_r, self._nudge_w)
                    self._wake_r = self._wake_w = self._nudge_r = self._nudge_w = -1
                    for fd in fds:
                        os.close(fd)

    def _sleep(self, timeout: Optional[float]) -> Optional[Events]:
        """Wait for work: the connections' events, or None when their (nested) selector
        has some, for this thread to take unless another one serves them."""
        if self._outer is None:
            return self._sel.select(timeout)
        ready = {fd for fd, _ in self._outer.poll(-1 if timeout is None else timeout)}
        if self._wake_r in ready:
            self._drain(self._wake_r)
        return None if self._sel.fileno() in ready else []

    def _handle(self, events: Events) -> None:
        for key, mask in events:
            self._guarded(self._on_event, key, mask)

    def _on_event(self, key: selectors.SelectorKey, mask: int) -> None:
        if key.data is LISTENER:
            self._accept(key.fileobj)  # type: ignore[arg-type]
        elif key.data is _WAKE or key.data is _NUDGE:
            self._drain(key.fd)
        elif callable(key.data):  # a watched descriptor's (a connection is not callable)
            key.data()
        else:
            conn: Connection = key.data
            if mask & selectors.EVENT_WRITE:
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn.sock.fileno() >= 0:
                self._read(conn)

    @staticmethod
    def _drain(fd: int) -> None:
        try:
            os.read(fd, 65536)
        except BlockingIOError:
            pass

    def _guarded(self, fn: Callable[..., None], *args: object) -> None:
        """Run loop work; a bug in one service must not stop the server for all others."""
        try:
            fn(*args)
        except Exception:
            sys.stderr.write("fiber: error in the server loop (it goes on):\n")
            traceback.print_exc()

    def _flush(self, conn: Connection, frames: Optional[Sequence[Frame]] = None) -> None:
        """Write what ``conn`` has waiting, after adding the message ``frames``; what the
        socket does not take now waits for it to become writable. A write that fails
        ends the connection once what it brought is read (not in the middle of serving
        one of its messages: after this batch of events)."""
        if conn.broken:
            return
        try:
            outbox = conn.outbox
            done = outbox.flush(conn.sock) if frames is None else outbox.write(conn.sock, frames)
        except OSError as e:
            conn.broken = True
            if e.errno == errno.ECONNRESET:  # else: as its reading says
                conn.reset_peer()
            self.call_soon(functools.partial(self._drain_close, conn))
            return
        want = selectors.EVENT_READ | (0 if done else selectors.EVENT_WRITE)
        if conn.writing != (not done) and conn.sock.fileno() >= 0:
            conn.writing = not done
            self._sel.modify(conn.sock, want, conn)

    def _read(self, conn: Connection) -> None:
        if conn.tls and not conn.sock.handshaken:  # type: ignore[attr-defined]
            if not self._tls_handshake(conn):
                return
        try:
            alive = conn.reader.feed_from(conn.sock)
        except (BlockingIOError, InterruptedError):
            return
        except ProtocolError as e:
            if conn.peer is None:
                self.door.refuse(conn, str(e))
                return
            alive = False
        except OSError as e:  # reset: how a killed process's connection ends
            alive = False
            if isinstance(e, tls.Altered):
                self._say_altered(conn, e)
                _abortive(conn)
            if conn.peer is None:
                self.door.dropped += 1
            elif e.errno != errno.ETIMEDOUT:  # or a link's reset: the process may live
                conn.reset_peer()
            elif conn.peer.anchor:  # its host: no answer
                self._silent[conn.peer.process_id] = None
                if len(self._silent) > 1024:
                    self._silent.popitem(last=False)
        messages = conn.reader.messages
        while messages and conn.sock.fileno() >= 0:
            frames = messages.popleft()
            if conn.peer is not None:
                conn.peer.received += 1
                if len(frames) >= 3:  # the envelope, read inline: every message's path
                    self.dispatch(conn.peer, bytes(frames[0]), bytes(frames[1]),
                                  bytes(frames[2]), frames[3:])
            elif not self._handshake(conn, frames):
                self.door.refuse(conn, "a wrong handshake" if conn.handshake.state == "hello"
                             else "a wrong proof of the secret")
                return
        if not alive:
            self._close_conn(conn)

    def _close_conn(self, conn: Connection, notify: bool = True) -> None:
        sock = conn.sock
        if sock.fileno() < 0:
            return
        self._conns.pop(sock.fileno(), None)
        self.door.left(conn)
        try:
            self._sel.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()
        conn.reader.close()
        conn.outbox.close()
        peer, conn.peer = conn.peer, None
        if peer is not None:
            left = self._open_of.pop(peer.process_id, 1) - 1
            if left:
                self._open_of[peer.process_id] = left
        if peer is None or not notify:
            return
        self.ended_peers.ended(peer)
        # Each service is told on its own: a bug in one must not keep the others (nor the
        # anchor count) from learning that the peer has gone.
        for service in list(self._services.values()):
            self._guarded(service.peer_gone, self, peer)
        self._guarded(self.receipts.peer_gone, self, peer)
        if peer.anchor:
            self._anchors[peer.process_id] -= 1
            if self._anchors[peer.process_id] <= 0:
                del self._anchors[peer.process_id]
                if peer.reset:  # it may live and anchor again: what it holds waits
                    self.call_later(REANCHOR_WAIT_S, functools.partial(
                        self._process_gone, peer.process_id))
                else:
                    self._process_gone(peer.process_id)

    def _process_gone(self, process_id: bytes) -> None:
        if process_id in self._gone:
            return
        if process_id not in self._anchors:  # it has not anchored again
            self._gone[process_id] = None
            if len(self._gone) > 4096:
                self._gone.popitem(last=False)
            self._close_all_of(process_id)  # its waits on other connections end with them
            for service in list(self._services.values()):
                self._guarded(service.process_gone, self, process_id)
