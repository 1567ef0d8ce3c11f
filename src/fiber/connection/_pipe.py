"""``Pipe`` and ``Connection`` between fiber processes on any hosts, and ``wait``. A pipe
lives on the hub of the process that created it, as two one-way channels. The design:
docs/contributing/transport.md, "Pipes"."""

from __future__ import annotations

import collections
import functools
import multiprocessing
import pickle
import secrets
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Deque,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from .._core import _runtime
from .._core._served import (
    Handle,
    HandleState,
    add_handoff,
    decode_wait,
    pack_wait,
    wait_seconds,
)
from .._process_state import here
from ..transport.client import Cancel, ConnectionLost, process_id
from ..transport.operations import handles
from ..transport.receipts import names_wait
from ..transport.serialization import Frame, loads
from ..transport.server import Peer, Server, Timer
from ..transport.unpicklable import dumps_explained
from . import _watch
from ._fileno import FilenoWatch
from ._watch import END_TAGS, end_of, end_tag

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

#: A recv waiting for a message: (peer, request id, op, its timeout's timer).
_Waiter = Tuple[Peer, bytes, bytes, Optional[Timer]]

__all__ = ["Pipe", "Connection", "BufferTooShort", "PipeService", "PipeOps", "waited_end",
           "Send", "Receive", "Handoff", "End", "Message"]


class BufferTooShort(multiprocessing.BufferTooShort):
    """``recv_bytes_into`` got a message longer than the buffer (as multiprocessing, whose
    ``BufferTooShort`` it is, so that ``except multiprocessing.BufferTooShort`` catches it)."""


_PICKLED = b"p"
_RAW = b"b"


class Message:
    """A pipe's message, as ``send`` writes it and ``recv`` is answered with: its kind,
    then its data (``_PICKLED`` and an object's pickle frames, or ``_RAW`` and one frame
    of bytes). Static, no object made: every message sent and received goes through it."""

    @staticmethod
    def pickled(frames: Sequence[Frame]) -> List[Frame]:
        """The message of an object pickled to ``frames`` (``send``)."""
        return [_PICKLED, *frames]

    @staticmethod
    def raw(data: bytes) -> List[Frame]:
        """The message of bytes (``send_bytes``)."""
        return [_RAW, data]

    @staticmethod
    def load(frames: Sequence[Frame]) -> Any:
        """The object (or bytes, for a raw one) a message carries (``recv``)."""
        if frames[0] == _RAW:
            return pickle.loads(frames[1])
        return loads(frames[1:])

    @staticmethod
    def as_bytes(frames: Sequence[Frame]) -> bytes:
        """A message's bytes: a raw one's, or its object pickled (``recv_bytes``)."""
        if frames[0] == _RAW:
            return bytes(frames[1])
        return pickle.dumps(loads(frames[1:]), protocol=5)


class PipeOps:
    """The pipe protocol's operations: each request names the end (``b"0"``, ``b"1"``)."""

    SEND = b"send"
    RECV = b"recv"
    CANCEL = b"cancel"
    UNRECV = b"unrecv"
    POLL = b"poll"
    HANDOFF = b"handoff"
    ATTACH = b"attach"
    RELEASE = b"release"
    CLOSE = b"close"


# The records of its requests: each names the end first (`_watch.end_tag`: b"0", b"1").
# Send's and Receive's, a message's way, are made as `namedtuple._make` makes a record
# (tuple.__new__, no call of the class's __new__) and write their end's tag directly.

_tuple_new = tuple.__new__


class Send(NamedTuple):
    """``send``: the end sending, and the message, the frames the other end's ``recv``
    is answered with, as they came (its kind, ``_PICKLED`` or ``_RAW``, then its data)."""

    end: int
    message: Sequence[Frame]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Send:
        return _tuple_new(cls, (end_of(payload[0]), payload[1:]))

    def frames(self) -> List[Frame]:
        return Send.pack(self.end, self.message)

    @staticmethod
    def pack(end: int, message: Sequence[Frame]) -> List[Frame]:
        """The frames of ``Send(end, message)``, without making the record: every message
        sent (as `fiber.synchronize._primitives.Caller.pack`)."""
        return [END_TAGS[end], *message]


class Receive(NamedTuple):
    """``recv``, ``poll``: the end, and how long the hub may hold the request (as
    `Wait`'s seconds)."""

    end: int
    wait: Optional[float]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Receive:
        return _tuple_new(cls, (end_of(payload[0]), decode_wait(payload[1])))

    def frames(self) -> List[Frame]:
        return Receive.pack(self.end, self.wait)

    @staticmethod
    def pack(end: int, wait: Optional[float]) -> List[Frame]:
        """The frames of ``Receive(end, wait)``, without making the record: every ``recv``."""
        return [END_TAGS[end], pack_wait(wait)]


class Handoff(NamedTuple):
    """``handoff``, ``attach``, ``release``: the end pickled, and the token of that
    pickle (what the process that unpickles it attaches with)."""

    end: int
    token: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Handoff:
        return cls(end_of(payload[0]), bytes(payload[1]))

    def frames(self) -> List[Frame]:
        return [end_tag(self.end), self.token]


class End(NamedTuple):
    """``close``: the end the sender's process lets go of."""

    end: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> End:
        return cls(end_of(payload[0]))

    def frames(self) -> List[Frame]:
        return [end_tag(self.end)]


class PipeService(_watch.Watched):
    """The two channels of one pipe, on its creator's hub."""

    protocol = "pipe"

    def __init__(self, creator: bytes) -> None:
        self.channels: Tuple[Deque[Sequence[Frame]], Deque[Sequence[Frame]]] = (
            collections.deque(), collections.deque())
        self.waiters: Tuple[List[_Waiter], ...] = ([], [])
        self.holders: Tuple[Set[bytes], Set[bytes]] = ({creator}, {creator})
        self.handoffs: Tuple[Set[bytes], Set[bytes]] = (set(), set())
        #: Per end, the ``wait()`` calls waiting for it (see _watch), told when it is ready.
        self.watchers: Tuple[List[_watch.Watch], ...] = ([], [])

    def peer_closed(self, end: int) -> bool:
        other = 1 - end
        return not self.holders[other] and not self.handoffs[other]

    def ready(self, end: int) -> bool:
        """Whether a ``recv`` on ``end`` would not block."""
        return bool(self.channels[end]) or self.peer_closed(end)

    @handles(PipeOps.SEND, Send)
    def send(self, server: Server, peer: Peer, req_id: bytes, msg: Send) -> None:
        end = msg.end
        if self.peer_closed(end):
            return  # nobody can ever read it (see the module docstring)
        self.channels[1 - end].append(msg.message)
        self._serve(server, 1 - end)

    @handles(PipeOps.RECV, Receive)
    def recv(self, server: Server, peer: Peer, req_id: bytes, msg: Receive) -> None:
        self._recv_or_poll(server, peer, req_id, PipeOps.RECV, msg)

    @handles(PipeOps.POLL, Receive)
    def poll(self, server: Server, peer: Peer, req_id: bytes, msg: Receive) -> None:
        self._recv_or_poll(server, peer, req_id, PipeOps.POLL, msg)

    def _recv_or_poll(self, server: Server, peer: Peer, req_id: bytes, op: bytes,
                      msg: Receive) -> None:
        end, wait = msg
        if self.channels[end] or self.peer_closed(end) or wait == 0:
            self._answer(server, end, peer, req_id, op)
        else:
            entry = (peer, req_id, op, None)
            timer = None if wait is None else server.call_later(
                wait, lambda: self._timeout(server, end, entry))
            self.waiters[end].append((peer, req_id, op, timer))

    @handles(PipeOps.CANCEL, Cancel)
    def cancel(self, server: Server, peer: Peer, req_id: bytes, msg: Cancel) -> None:
        """A recv its caller gave up on (its request id the frame: see
        `fiber.transport.client.Client.request`'s ``withdraw``) is dropped if it still
        waits. Answered in any case: a message handed to it before was sent first, on
        the same connection, and its caller sends it again before it takes this
        answer. A recv asked again on a new connection after a reset is found from there
        too (`names_wait`), where its answer goes."""
        abandoned = msg.req_id
        for end in (0, 1):
            for w in [w for w in self.waiters[end] if names_wait(w[0], w[1], peer, abandoned)]:
                self._drop_waiter(end, w)
                server.receipts.forget(abandoned)  # (a ticket, asked on TCP)
        server.reply(peer, req_id, b"ok")

    @handles(PipeOps.UNRECV, Send)
    def unrecv(self, server: Server, peer: Peer, req_id: bytes, msg: Send) -> None:
        """A message handed to a recv its caller gave up on (``msg.end``: the end that
        read it) goes back to the front of its channel, read before those sent after
        it (a pipe is FIFO), even if the other end closed since."""
        self.channels[msg.end].appendleft(msg.message)
        self._serve(server, msg.end)

    @handles(PipeOps.HANDOFF, Handoff)
    def handoff(self, server: Server, peer: Peer, req_id: bytes, msg: Handoff) -> None:
        """An end is pickled into a job's payload: held until the job takes it."""
        self.handoffs[msg.end].add(msg.token)
        server.reply(peer, req_id, b"ok")

    @handles(PipeOps.ATTACH, Handoff)
    def attach(self, server: Server, peer: Peer, req_id: bytes, msg: Handoff) -> None:
        """A job took the end handed off to it: its process holds it now."""
        self.handoffs[msg.end].discard(msg.token)
        self.holders[msg.end].add(peer.process_id)
        server.reply(peer, req_id, b"ok")

    @handles(PipeOps.RELEASE, Handoff)
    def release(self, server: Server, peer: Peer, req_id: bytes, msg: Handoff) -> None:
        """A handoff that no job will take."""
        self.handoffs[msg.end].discard(msg.token)
        self._serve(server, 1 - msg.end)

    @handles(PipeOps.CLOSE, End)
    def close(self, server: Server, peer: Peer, req_id: bytes, msg: End) -> None:
        self.holders[msg.end].discard(peer.process_id)
        self._serve(server, 1 - msg.end)

    def _answer(self, server: Server, end: int, pid: Peer, req_id: bytes, op: bytes) -> None:
        channel = self.channels[end]
        if op == PipeOps.POLL:
            ready = bool(channel) or self.peer_closed(end)
            server.reply(pid, req_id, b"ok" if ready else b"empty")
        elif channel:
            msg = channel.popleft()
            if not server.reply(pid, req_id, b"ok", msg):
                channel.appendleft(msg)
        elif self.peer_closed(end):
            server.reply(pid, req_id, b"eof")
        else:
            server.reply(pid, req_id, b"empty")

    def _serve(self, server: Server, end: int) -> None:
        waiters = self.waiters[end]
        while waiters and self.ready(end):
            pid, req_id, op, timer = waiters.pop(0)
            if timer is not None:
                timer.cancel()
            self._answer(server, end, pid, req_id, op)
        # Blocked recvs took what came first; wait() calls are told if anything is left.
        self.notify_watchers(end)

    def _timeout(self, server: Server, end: int, entry: _Waiter) -> None:
        for i, w in enumerate(self.waiters[end]):
            if w[0] is entry[0] and w[1] == entry[1]:
                del self.waiters[end][i]
                server.reply(w[0], w[1], b"empty")
                return

    answers_again = True  # a recv under way outlives a reset (see fiber._core._parking)

    def peer_gone(self, server: Server, peer: Peer) -> None:
        for end in (0, 1):
            self.waiters[end][:] = [w for w in self.waiters[end] if w[0] is not peer
                                    or server.receipts.keeps_waiting(
                                        server, w[1], peer,
                                        functools.partial(self._drop_waiter, end, w))]

    def _drop_waiter(self, end: int, waiter: _Waiter) -> None:
        """A recv dropped: kept after a reset, its caller did not ask for it again, or its
        process is gone."""
        if waiter[3] is not None:
            waiter[3].cancel()
        self.waiters[end][:] = [w for w in self.waiters[end] if w is not waiter]

    def process_gone(self, server: Server, process_id: bytes) -> None:
        for end in (0, 1):
            self.holders[end].discard(process_id)
            for w in [w for w in self.waiters[end] if w[0].process_id == process_id]:
                self._drop_waiter(end, w)
                server.receipts.forget(w[1])
        for end in (0, 1):
            self._serve(server, end)


class Connection(Handle):
    """One end of a `Pipe`, with the API of ``multiprocessing.connection.Connection``."""

    _asks_again = True  # its waits outlive a reset (see Handle, fiber._core._parking)

    _fileno_watch: Optional[FilenoWatch] = None  # made by the first fileno()

    def __init__(self, service: PipeService, end: int, readable: bool,
                 writable: bool) -> None:
        super().__init__(service, b"p")
        self._end = end
        self._readable = readable
        self._writable = writable
        self._closed = False

    @classmethod
    def _pair(cls, duplex: bool) -> Tuple[Connection, Connection]:
        service = PipeService(process_id())
        a = cls(service, 0, True, duplex)
        _watch.ensure_service(_runtime.hub())
        # The other end, of this class (its private state is set here: noqa SLF001).
        b = cls.__new__(cls)
        Handle.__setstate__(b, (a._name, a._address))
        # the first keeps the service registered while either end lives; pickling either
        # end keeps it served once both are dropped
        b._shared_owner = a  # type: ignore[attr-defined]  # noqa: SLF001
        b._shared = a._shared  # noqa: SLF001
        b._end, b._readable, b._writable = 1, duplex, True  # noqa: SLF001
        b._closed = False  # noqa: SLF001
        return a, b

    def __reduce__(self) -> Tuple[Callable[..., Connection],
                                  Tuple[HandleState, int, bool, bool, bytes]]:
        self._check_closed()
        token = secrets.token_bytes(8)
        self._request(PipeOps.HANDOFF, Handoff(self._end, token).frames())
        add_handoff(lambda: self._send(PipeOps.RELEASE, Handoff(self._end, token).frames()))
        return (_rebuild, (Handle.__getstate__(self), self._end, self._readable,
                           self._writable, token))

    def _lost(self, e: ConnectionLost) -> BaseException:
        return EOFError(f"the process serving this pipe is gone ({e.address})")

    # -- properties ---------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether this end was closed in this process (other copies of it may still be open)."""
        return self._closed

    @property
    def readable(self) -> bool:
        """Whether this end can ``recv`` (False for the sending end of a one-way ``Pipe``)."""
        return self._readable

    @property
    def writable(self) -> bool:
        """Whether this end can ``send`` (False for the receiving end of a one-way ``Pipe``)."""
        return self._writable

    def _check_closed(self) -> None:
        if self._closed:
            raise OSError("handle is closed")

    def _check_readable(self) -> None:
        self._check_closed()
        if not self._readable:
            raise OSError("connection is write-only")

    def _check_writable(self) -> None:
        self._check_closed()
        if not self._writable:
            raise OSError("connection is read-only")

    # -- sending ------------------------------------------------------------------------

    def send(self, obj: object) -> None:
        """Send a picklable object to the other end.

        Raises:
            BrokenPipeError: the other end is closed everywhere (known at once in the
                pipe's creator only; elsewhere the message is dropped).
        """
        self._check_writable()
        self._check_not_broken()
        frames = dumps_explained(obj, "the object sent", "obj")
        self._send(PipeOps.SEND, Send.pack(self._end, Message.pickled(frames)))

    def _check_not_broken(self) -> None:
        hub = _runtime.hub_if_started()
        if hub is None or hub.address != self._address:
            return
        service = hub.service(self._name)
        if isinstance(service, PipeService) and service.peer_closed(self._end):
            raise BrokenPipeError(32, "the other end of the pipe is closed")

    def send_bytes(self, buf: ReadableBuffer, offset: int = 0, size: Optional[int] = None) -> None:
        """Send bytes from a bytes-like object, as one message.

        ``offset`` and ``size`` select a part of ``buf`` (in bytes), as multiprocessing's.

        Raises:
            ValueError: ``offset`` or ``size`` out of range.
            OSError: this end is closed or read-only.
            BrokenPipeError: the other end is closed (when this process serves the pipe).
        """
        self._check_writable()
        view = memoryview(buf).cast("B")
        if offset < 0 or offset > len(view):
            raise ValueError("offset out of range")
        if size is None:
            size = len(view) - offset
        if size < 0 or offset + size > len(view):
            raise ValueError("buffer length < offset + size")
        self._check_not_broken()
        self._send(PipeOps.SEND,
                   Send.pack(self._end, Message.raw(bytes(view[offset:offset + size]))))

    # -- receiving ----------------------------------------------------------------------

    def _receive(self) -> List[Frame]:
        self._check_readable()
        status, frames = self._request(PipeOps.RECV, Receive.pack(self._end, None),
                                       on_late=self._give_back, withdraw=PipeOps.CANCEL)
        watch = self._fileno_watch
        if watch is not None:
            watch.consumed()
        if status == b"eof":
            raise EOFError
        return frames

    def _give_back(self, status: bytes, frames: Sequence[Frame]) -> None:
        if status == b"ok":  # abandoned recv: the message goes back to the front
            self._send(PipeOps.UNRECV, Send.pack(self._end, frames))

    def recv(self) -> Any:
        """Receive an object sent with ``send`` (or bytes sent with ``send_bytes``).

        Raises:
            EOFError: nothing is left and the other end is closed everywhere.
        """
        return Message.load(self._receive())

    def recv_bytes(self, maxlength: Optional[int] = None) -> bytes:
        """Receive one message as bytes.

        Raises:
            EOFError: nothing is left and the other end is closed everywhere.
            OSError: the message is longer than ``maxlength``.
        """
        if maxlength is not None and maxlength < 0:
            raise ValueError("negative maxlength")
        data = Message.as_bytes(self._receive())
        if maxlength is not None and len(data) > maxlength:
            self.close()
            raise OSError("bad message length")
        return data

    def recv_bytes_into(self, buf: WriteableBuffer, offset: int = 0) -> int:
        """Receive one message into ``buf`` at ``offset``; returns its length.

        Raises:
            BufferTooShort: the message does not fit; its bytes are in ``args[0]``.
        """
        view = memoryview(buf).cast("B")
        if offset < 0 or offset > len(view):
            raise ValueError("negative offset" if offset < 0 else "offset too large")
        data = Message.as_bytes(self._receive())
        if len(data) > len(view) - offset:
            raise BufferTooShort(data)
        view[offset:offset + len(data)] = data
        return len(data)

    def poll(self, timeout: Optional[float] = 0.0) -> bool:
        """Whether ``recv`` would not block, waiting up to ``timeout`` s (None: forever)."""
        self._check_readable()
        status, _ = self._request(PipeOps.POLL,
                                  Receive.pack(self._end, wait_seconds(True, timeout)))
        return status == b"ok"

    def close(self) -> None:
        """Close this process's hold on the end; the other end sees EOF when none is left."""
        if self._closed:
            return
        self._closed = True
        watch = self._fileno_watch
        if watch is not None:
            watch.close()
        try:
            self._send(PipeOps.CLOSE, End(self._end).frames())
        except (EOFError, ConnectionLost):
            pass

    def fileno(self) -> int:
        """A file descriptor that is readable while ``recv`` would not block, for
        ``select``, ``selectors`` and ``multiprocessing.connection.wait`` (made on first
        use, with a thread that keeps it so).

        Raises:
            OSError: the connection is closed.
        """
        self._check_closed()
        with here.transport.pipe_fileno_lock:  # two threads asking at once share one watch
            if self._fileno_watch is None:  # a write-only end: never readable, no thread
                self._fileno_watch = FilenoWatch(self, self.readable)
        return self._fileno_watch.fileno()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        # as multiprocessing's: <multiprocessing.connection.Connection object at 0x7f...>
        cls = type(self)
        return f"<{cls.__module__}.{cls.__qualname__} object at {id(self):#x}>"


def _rebuild(state: HandleState, end: int, readable: bool, writable: bool,
             token: bytes) -> Connection:
    # An end of this module's class unpickled: its private state is set here.
    conn = Connection.__new__(Connection)
    Handle.__setstate__(conn, state)
    conn._end, conn._readable, conn._writable = end, readable, writable  # noqa: SLF001
    conn._closed = False  # noqa: SLF001
    conn._request(PipeOps.ATTACH, Handoff(end, token).frames())  # noqa: SLF001
    return conn


def Pipe(duplex: bool = True) -> Tuple[Connection, Connection]:
    """Two connected ends; with ``duplex=False`` the first only receives, the second sends."""
    return Connection._pair(duplex)  # noqa: SLF001 - this module's class


def waited_end(conn: Connection) -> Tuple[bytes, int]:
    """What names ``conn``'s end in a ``wait()`` request (`_watch.WaitAny`): its
    service, its end.

    Raises:
        OSError: the end is closed or write-only (as multiprocessing's ``wait``).
    """
    conn._check_readable()  # noqa: SLF001 - this module's class
    return (conn.service_name, conn._end)  # noqa: SLF001
