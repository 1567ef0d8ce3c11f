"""The client side of a `Server`: one authenticated connection used by one thread, with
no helper thread (`fiber.transport.channels` keeps one a thread and address, and a
process's *anchor* to each server; see docs/contributing/architecture.md, "The
transport")."""

from __future__ import annotations

import collections
import errno
import itertools
import secrets
import socket
import struct
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Sequence, TypeVar

from .._process_state import here
from ..errors import AuthenticationError, TransportError
from . import _resend, auth, tls
from . import cpus as _cpus
from .framing import FrameReader, ProtocolError, send_frames
from .local import Cancel, LateReply, Reply, spin_of
from .serialization import Frame
from .settings import DEFAULTS, Settings, SettingsSource
from .settings import defaults as _defaults
from .sockets import connect, ended_with, readable, reset_on_close, server_id, tune

__all__ = ["Client", "Cancel", "ConnectionLost", "CannotConnect", "RESET_RETRIES",
           "SPENT_GRACE_CONNECT_S", "again_on_a_new_connection", "process_id",
           "connect_timeout", "Settings", "DEFAULTS", "renew_process_id",
           "sync_unanswered"]



class ConnectionLost(TransportError):
    """The server of a fiber object ended or became unreachable."""


class CannotConnect(ConnectionLost):
    """No connection could be made to the server (none was made: nothing was sent).
    ``refused``: its host answered that nothing listens there (the server is gone),
    rather than not answering at all (unreachable, or its network not up yet)."""

    def __init__(self, message: str, address: str = "", refused: bool = False) -> None:
        super().__init__(message, address)
        self.refused = refused


class _Stalled(ConnectionLost):
    """A connection's handshake got no answer in time, or the link ended it: tried again
    on a new connection (see `Client._open`)."""


#: Connections a client tries for its handshakes, at most.
_HANDSHAKE_TRIES = 2
#: Seconds to wait for a connection and its handshake when the call has no deadline, at
#: least (see `connect_timeout`).
CONNECT_TIMEOUT = 10.0
#: Times a call safe to repeat is made again on a new connection, each time its
#: connection fails under it (a reset): a link that resets connections may reset the
#: new ones too (a get's second connection can reset 1.5 s after the first: asked
#: again once only, its item would be lost).
RESET_RETRIES = 10
#: Seconds a new connection may take to a server whose last connection timed out: that
#: server was silent for the whole grace (``heartbeat_timeout``), so it gets one short
#: try (two SYNs and a handshake on a healthy link), not a second grace (a caller of a
#: Kubernetes pod deleted with its network waited 30 s for the silence, then 30 s more
#: to connect to an address nobody held).
SPENT_GRACE_CONNECT_S = 3.0
#: Seconds a request its caller gave up on waits for the server to drop it (see
#: `Client.request`'s ``withdraw``), at most: then its late reply is handed over at this
#: client's next read, as it would be without a withdraw.
WITHDRAW_WAIT_S = 5.0
#: Connections with messages not known to be served (see `Client.sent_unanswered`) past
#: which those of ended threads are synchronized, at a send, and let go.
UNANSWERED_SWEEP = 64
#: Seconds that sweep may take, at most (it is a put's, or a send's).
UNANSWERED_SWEEP_S = 1.0

T = TypeVar("T")


def again_on_a_new_connection(call: Callable[[], T]) -> T:
    """``call()``, made again while its connection fails under it, on a new connection
    each time (the next call gets one), up to `RESET_RETRIES` times: for a call that is
    safe to repeat after a reset (a put's resend, a request with its ticket, a new
    lifeline). A server that refuses a new connection is gone.

    Raises:
        CannotConnect: the server refused a new connection (or none could be made).
        ConnectionLost: the last connection failed too.
    """
    for _ in range(RESET_RETRIES):
        try:
            return call()
        except CannotConnect:
            raise
        except ConnectionLost:
            pass
    return call()


def connect_timeout(settings: SettingsSource = _defaults, address: str = "") -> float:
    """Seconds a connection (to ``address``) and its handshake may take when the call has
    no deadline: `CONNECT_TIMEOUT`, or the settings' ``heartbeat_timeout`` if longer. A
    link that drops packets for less than that grace loses no peer, and must not fail a
    new connection either (a handshake over 5% loss and a 400 ms round trip can take
    over 10 s, and the job that made it would end).

    But a server whose connection timed out less than a grace ago has had its grace:
    `SPENT_GRACE_CONNECT_S`, until a connection to it is made again."""
    grace = settings().heartbeat_timeout
    since = here.transport.timed_out.get(address) if address else None
    if since is not None and time.monotonic() - since < grace:
        return SPENT_GRACE_CONNECT_S
    return max(CONNECT_TIMEOUT, grace)


def process_id() -> bytes:
    """A random id of this process, unique across every host of the program."""
    return here.transport.process_id


def renew_process_id() -> None:
    """Give this process a new id: a process forked from another that had one (the
    local backend's fork server forks its jobs from a template), before it connects."""
    here.transport.process_id = secrets.token_bytes(16)


def sync_unanswered(seconds: float, ended_threads_only: bool = False) -> None:
    """Wait, ``seconds`` at most in all, until each server has served the messages
    without a reply (puts, sends, releases) that this thread, or a thread that has
    ended, sent on a connection with no reply since (`Client.sent_unanswered`): one
    ``sync`` round trip a connection, each answered once what came before it on its
    connection was served. A job calls it at its end, before it reports its exit: once
    its exit is seen, what it put is in the queue, as with ``multiprocessing`` (whose
    child flushes its queues' feeder threads as it exits). With ``ended_threads_only``,
    only those of ended threads (a sweep). The connections of threads that still run
    are left to them (one thread uses a connection); one lost is left to its resend.
    Best effort: a server that does not answer in time is given up."""
    state = here.transport
    me = threading.current_thread()
    with state.unanswered_lock:
        taken = [c for c, t in state.unanswered.items()
                 if not t.is_alive() or (t is me and not ended_threads_only)]
        for c in taken:
            del state.unanswered[c]
            c.noted = False
    deadline = time.monotonic() + seconds
    for c in taken:
        left = deadline - time.monotonic()
        if not c.unanswered or c.lost or left <= 0:
            continue
        try:
            c.request(_resend.RESEND_SERVICE, _resend.ResendOps.SYNC, [], timeout=left)
        except Exception:
            pass  # gone, or slow: its messages are what its server makes of them


def _raised_by_a_handler(e: BaseException, sock: socket.socket) -> bool:
    """Whether ``e``, met by a read of ``sock``, was raised by a signal handler (``raise
    TimeoutError`` at an alarm), which interrupted the read before it took any byte,
    not by the socket: an ``OSError`` that no call of a connected socket raises. Its
    errors carry an errno; those of `fiber.transport.tls` without one are
    each a ``ConnectionError``; and a timeout is raised only by a socket that has one (a
    connection's handshake)."""
    return (isinstance(e, OSError) and e.errno is None and not isinstance(e, ConnectionError)
            and sock.gettimeout() is None)


class Client:
    """An authenticated connection to one server, used by one thread at a time; or read
    by one thread while others send on it under a lock of their own (a queue's lease:
    see fiber.queues._lending): a read and a send share no state but ``lost``."""

    #: Whether a message without a reply was sent on it since its last reply (see
    #: `sent_unanswered`).
    unanswered = False
    #: Whether it is among the connections `sync_unanswered` looks at (noted once, at
    #: its first such message: not at each, which cost a pipe's round trip 8%).
    noted = False

    def __init__(self, address: str, *, anchor: bool = False, timeout: float = CONNECT_TIMEOUT,
                 settings: SettingsSource = _defaults,
                 adopted: Optional[socket.socket] = None) -> None:
        """Connect to ``address`` and authenticate (see `_open`); or, with ``adopted``,
        take that socket, this process's end of a pair whose other end the server serves
        already (see `fiber.transport.server.Server.adopt`)."""
        self.address = address
        self._settings = settings
        #: An anchor is also the client of the first thread that asks for one (see
        #: `get_client`): a job's main thread makes no second connection.
        self.taken = False
        self._ids = itertools.count(1)
        self._late: Dict[bytes, LateReply] = {}
        #: Messages the server sent unasked (request id empty: a pool's tasks) that came
        #: while this client waited for a reply; `next_push` gives them first.
        self._pushes: Deque[List[Frame]] = collections.deque()
        if adopted is not None:
            self._take(adopted)
        else:
            self._open(anchor, timeout)
        try:
            self.sock.settimeout(None)
            if self._log is not None:
                self._log.counting = True
            here.transport.timed_out.pop(address, None)  # (it answers again)
            _resend.send_orphans(self, address)  # what ended connections lost, first
        except BaseException:
            self.sock.close()
            raise

    def _open(self, anchor: bool, timeout: float) -> None:
        """Connect (within ``timeout``, its retries included), then the TLS and fiber
        handshakes (within ``timeout`` together); once more, on a new connection, if the
        handshakes stalled: no answer in time, or the link ended them.

        A handshake over a lossy link can stall where an open connection would only be
        reset: a segment lost four or five times in a row waits out TCP's doubling
        retransmission timer for most of the grace, and a new connection starts that
        timer afresh. The server waits longer than its client (`strangers.handshake_ttl`),
        so a waiting peer is not closed as a stranger.

        Raises:
            CannotConnect: no connection could be made (refused: nothing listens there).
            ConnectionLost: the handshake stalled twice, or the server has ended.
            AuthenticationError: the server, or its certificate, is not the program's.
        """
        secure = tls.policy()
        for tries_left in reversed(range(_HANDSHAKE_TRIES)):
            try:
                sock = connect(self.address, timeout,
                               unix=secure is None or secure.mode != "on")
            except OSError as e:
                raise CannotConnect(f"cannot connect: {e}", self.address,
                                    isinstance(e, ConnectionRefusedError)) from None
            try:
                self._authenticate(sock, anchor, timeout)
                return
            except _Stalled:
                reset_on_close(sock)  # the server may have admitted it: the process lives
                sock.close()
                if not tries_left:
                    raise
            except BaseException:
                sock.close()
                raise

    def _take(self, sock: socket.socket) -> None:
        """Make ``sock`` this client's connection (not yet authenticated, or adopted)."""
        self.sock = sock
        self.lost = False
        self._unix = sock.family == socket.AF_UNIX
        self.may_reset = not self._unix  # (a Unix socket has no link to reset it)
        #: Its socket is a `tls.TlsSocket`.
        self._tls = isinstance(sock, tls.TlsSocket)
        self._reader = FrameReader(unix=self._unix, tls=self._tls)
        #: What it writes, where a link may reset it (TCP: see `_resend`).
        self._log: Optional[_resend.SentLog] = None
        self.peer_id = 0  # its id at the server (told at the handshake)
        self.error = 0  # the errno that ended it, if one did
        self.retune()

    def _authenticate(self, sock: socket.socket, anchor: bool, timeout: float) -> None:
        """The TLS handshake (if this process's TLS wants one) and fiber's, on ``sock``,
        within ``timeout``."""
        deadline = time.monotonic() + timeout
        try:
            secured = tls.wrap_client(sock, self.address, timeout)
        except OSError as e:  # (an AuthenticationError is not one: it is raised)
            raise _Stalled(f"the connection ended in its TLS handshake: {e}",
                           self.address) from None
        self._take(secured)
        self._log = _resend.SentLog.for_socket(self.sock)
        if self._log is not None and self._tls:  # the TLS handshake's bytes
            self._log.wrote(self.sock.take_written())  # type: ignore[attr-defined]
        self._handshake(anchor, deadline, timeout)

    def retune(self) -> None:
        """Apply the settings' heartbeat to the connection: at its start, and again when
        they changed (a job's, once its program's settings have arrived)."""
        given = self._settings()
        tune(self.sock, given.heartbeat_interval, given.heartbeat_timeout)

    def request(self, service: bytes, op: bytes, frames: Sequence[Frame] = (),
                timeout: Optional[float] = None, on_late: Optional[LateReply] = None,
                ticket: bytes = b"", withdraw: bytes = b"") -> Reply:
        """Send a request and wait for its reply: ``(status, payload_frames)``.

        ``on_late`` receives a reply that arrives after this call gave up (timeout,
        KeyboardInterrupt, an exception raised by a signal handler), so that what the
        server handed out is not lost. ``withdraw``, an op of ``service`` that drops a
        waiting request (its id the frame), is then asked at once (see `_withdraw`): the
        reply goes to ``on_late`` before this call raises, not at this client's next read,
        which may never come. ``ticket`` (`fiber.transport.receipts.ticket`) is the
        request's id: asked again with the same ticket on a new connection, a service
        that ``answers_again`` answers it again.

        Raises:
            ConnectionLost: the server is gone.
            TimeoutError: no reply within ``timeout`` (the request may still be served).
        """
        req_id = ticket or struct.pack("<Q", next(self._ids))
        self.send_message([service, op, req_id, *frames])
        try:
            reply = self._wait(req_id, timeout)
        except BaseException:
            if on_late is not None and not self.lost:
                self._late[req_id] = on_late
                if withdraw:
                    self._withdraw(service, withdraw, req_id)
            raise
        self.unanswered = False  # served in order: what was sent before it was served too
        return reply

    def _withdraw(self, service: bytes, op: bytes, req_id: bytes) -> None:
        """Ask ``service`` to drop request ``req_id``, which its caller gave up on, with
        ``op``, and wait for the answer: replies on a connection come in the order the
        server sent them, so a reply it had sent to ``req_id`` comes first and goes to
        that request's ``on_late`` now (a queue's item is given back while a child that
        never reads this connection again lives on). Best effort: if the connection
        fails, or the answer is slow, the late reply is left to the next read."""
        try:
            self.request(service, op, Cancel(req_id).frames(), timeout=WITHDRAW_WAIT_S)
        except Exception:
            return  # (the caller's own exception is what its caller sees)
        self._late.pop(req_id, None)  # answered before, or dropped: no reply will come

    def send(self, service: bytes, op: bytes, frames: Sequence[Frame] = ()) -> None:
        """Send a message that gets no reply (kept until acknowledged: see `_resend`)."""
        nbytes = self.send_message([service, op, b"", *frames])
        if self._log is not None:
            self._log.keep(nbytes, self.sock, service, op, frames)

    def sent_unanswered(self) -> None:
        """Its thread sent a message without a reply on it (a put: see
        ``fiber._core._served.Handle._send``): until a reply on it shows that its server
        served it, `sync_unanswered` asks. The connection is noted once, and kept (open,
        even once its thread ends) until `sync_unanswered` lets it go: at the job's end,
        or past `UNANSWERED_SWEEP` noted connections, those of ended threads (a program
        that starts many threads that each put)."""
        self.unanswered = True
        if self.noted:
            return
        self.noted = True
        state = here.transport
        with state.unanswered_lock:
            state.unanswered[self] = threading.current_thread()
            sweep = len(state.unanswered) > UNANSWERED_SWEEP
        if sweep:
            sync_unanswered(UNANSWERED_SWEEP_S, ended_threads_only=True)

    def start(self, service: bytes, op: bytes, frames: Sequence[Frame],
              on_reply: LateReply) -> bytes:
        """Send a request without waiting; its reply goes to ``on_reply`` when a later
        read of this client meets it (`serve_late`, or another request's wait).
        Returns the request's id."""
        req_id = struct.pack("<Q", next(self._ids))
        self._late[req_id] = on_reply
        try:
            self.send_message([service, op, req_id, *frames])
        except BaseException:
            del self._late[req_id]
            raise
        return req_id

    def serve_late(self) -> None:
        """Read what has come, without blocking, and hand the replies it completes to
        their ``on_reply`` (messages the server pushed are kept for `next_push`;
        what is neither is dropped, as in `request`).

        Raises:
            ConnectionLost: the server is gone.
        """
        while self._feed(socket.MSG_DONTWAIT):
            pass
        messages = self._reader.messages
        while messages:
            self._route(messages.popleft())

    def next_push(self, timeout: Optional[float], spin: float = 0.0
                  ) -> Optional[List[Frame]]:
        """The next message the server sent unasked, ``[b"", op, *payload]``, waiting up
        to ``timeout`` s (None: for ever; 0: only what has come), after polling for it for
        ``spin`` s while a CPU is spare; None at the timeout. Replies to requests started
        with `start` met meanwhile go to their ``on_reply``.

        A pool's worker takes its tasks so on the connection that also carries its
        tasks' own calls to the master: a push that comes while such a call waits for
        its reply is kept for this, in order.

        Raises:
            ConnectionLost: the server is gone.
        """
        if self._pushes:
            return self._pushes.popleft()
        if spin and not self._reader.messages:
            self.poll(spin)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = self.receive(left)
            if msg is None:
                return None
            if not msg[0]:
                return msg
            self._route(msg)

    def _route(self, msg: List[Frame]) -> None:
        """A message that is not the reply being waited for: a push (kept), the reply
        of a started request (handed over), or a stale reply (dropped)."""
        rid = bytes(msg[0])
        if not rid:
            self._pushes.append(msg)
            return
        late = self._late.pop(rid, None)
        if late is not None:
            late(bytes(msg[1]), msg[2:])

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        self._reader.close()

    def send_message(self, frames: Sequence[Frame]) -> int:
        """Send one message as it is (its request id included: see `receive`); returns
        the bytes written.

        Raises:
            ConnectionLost: the server is gone.
        """
        if self.lost:
            raise ConnectionLost("connection lost", self.address)
        try:
            nbytes = send_frames(self.sock, frames, self._unix)
            if self._tls:  # the bytes on the wire, which the kernel acknowledges
                nbytes = self.sock.take_written()  # type: ignore[attr-defined]
        except OSError as e:
            self.mark_lost(e.errno or 0)
            raise ConnectionLost(f"send failed: {e}", self.address) from None
        if self._log is not None:
            self._log.wrote(nbytes)
        return nbytes

    def found_ended(self) -> bool:
        """Whether the connection has ended: marked lost already, or found ended now
        (then marked lost with the errno that ended it; 0: a plain end, or the socket
        closed here). Its own thread may not know yet (see `ended_with`)."""
        if not self.lost:
            why = 0 if self.sock.fileno() < 0 else ended_with(self.sock)
            if why is None:
                return False
            self.mark_lost(why)
        return True

    def mark_lost(self, error: int = 0) -> None:
        """The connection has failed (``error``: the errno that said so, if known): its
        no-reply messages that did not arrive go to the next connection to the same
        server (see `_resend`)."""
        self.error = self.error or error
        self.lost = True
        if error == errno.ETIMEDOUT:  # silent for the grace (keepalive, user timeout)
            here.transport.timed_out[self.address] = time.monotonic()
        if self._log is not None:
            self._log.lost(self.sock, self.address, self.peer_id)

    def poll(self, seconds: float) -> None:
        """Read what comes within ``seconds``, polling while a CPU is spare (see
        `fiber.transport.cpus.poll`), until a message is complete.

        Raises:
            ConnectionLost: as `receive`.
        """
        messages = self._reader.messages
        _cpus.poll(lambda: messages or (self._feed(socket.MSG_DONTWAIT) and messages), seconds)

    def receive(self, timeout: Optional[float]) -> Optional[List[Frame]]:
        """The next message (``[req_id, status, *payload]``, or what the server pushed),
        or None at the timeout; for a thread that reads this client's messages itself.

        Raises:
            ConnectionLost: the peer is gone.
        """
        reader = self._reader
        deadline = None if timeout is None else time.monotonic() + timeout
        while not reader.messages:
            flags = 0
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if left == 0:
                    flags = socket.MSG_DONTWAIT  # a poll: one syscall, not select + recv
                elif not readable([self.sock], left):
                    return None
            if not self._feed(flags):
                return None
        return reader.messages.popleft()

    def _feed(self, flags: int) -> bool:
        """One read into the reader; False when nothing was there (a non-blocking read).

        Raises:
            ConnectionLost: the peer closed the connection, or it failed.
        """
        try:
            alive = self._reader.feed_from(self.sock, flags)
        except BlockingIOError:
            return False
        except (OSError, ProtocolError) as e:
            if _raised_by_a_handler(e, self.sock):
                raise  # the connection is as it was: the caller's exception, unchanged
            self.mark_lost(getattr(e, "errno", 0) or 0)
            if isinstance(e, tls.Altered):
                tls.say_altered(f"process {here.pid} closed its connection to {self.address}", e)
            raise ConnectionLost(f"connection lost: {e}", self.address) from None
        if not alive:
            self.mark_lost()
            raise ConnectionLost("connection lost", self.address)
        return True

    def _wait(self, req_id: bytes, timeout: Optional[float]) -> Reply:
        deadline = None if timeout is None else time.monotonic() + timeout
        spin = spin_of(self._settings) if not self._reader.messages else 0.0
        if spin:  # a quick reply is then read without a wake-up (see fiber.transport.cpus)
            self.poll(spin if timeout is None else min(spin, timeout))
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            msg = self.receive(left)
            if msg is None:
                raise TimeoutError(f"no reply from {self.address} within {timeout} s")
            if bytes(msg[0]) == req_id:
                return bytes(msg[1]), msg[2:]
            self._route(msg)

    def _handshake(self, anchor: bool, deadline: float, timeout: float) -> None:
        """fiber's handshake, done by ``deadline`` (``timeout`` s from the first)."""
        cnonce = auth.new_nonce()
        self._handshake_send(auth.ClientHello(cnonce, here.transport.process_id, anchor).frames())
        try:
            chal = auth.Challenge.decode(self._handshake_reply(deadline, timeout))
        except (ValueError, IndexError):
            raise AuthenticationError(
                f"unexpected handshake reply from {self.address}") from None
        if not auth.verify(auth.server_proof(cnonce, chal.nonce), chal.proof):
            raise AuthenticationError(
                f"the server at {self.address} does not hold this program's secret")
        if chal.server_id != server_id(self.address).encode():
            raise ConnectionLost("this server has ended; another one of the program listens "
                                 "at its port now", self.address)
        self._handshake_send(auth.ClientProof(auth.client_proof(cnonce, chal.nonce)).frames())
        try:
            admitted = auth.Admitted.decode(self._handshake_reply(deadline, timeout))
        except (ValueError, IndexError):
            raise AuthenticationError(
                f"the server at {self.address} refused our credentials") from None
        if admitted.peer_id is not None:
            self.peer_id = admitted.peer_id

    def _handshake_send(self, frames: List[Frame]) -> None:
        try:
            self.send_message(frames)
        except ConnectionLost as e:
            raise _Stalled(f"the connection ended in its handshake: {e}",
                           self.address) from None

    def _handshake_reply(self, deadline: float, timeout: float) -> List[Frame]:
        try:
            msg = self.receive(max(0.0, deadline - time.monotonic()))
        except ConnectionLost:
            # A server ending (or shedding unauthenticated connections) closes without a
            # word; one that refuses our proof says so (DENY), and a stranger fails its own.
            raise _Stalled("the server closed the connection during the handshake",
                           self.address) from None
        if msg is None:
            raise _Stalled(f"no handshake answer within {timeout} s", self.address)
        return msg
