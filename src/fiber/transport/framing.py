"""Messages on a byte stream: a message is a list of frames, written from the caller's
buffers and read into buffers of their own size, with no copy into a joined string. The
wire format: docs/contributing/transport.md, "Framing"."""

from __future__ import annotations

import array
import collections
import functools
import mmap
import os
import socket
import struct
from typing import Any, Deque, List, Optional, Sequence, Tuple, Union

from . import memfd
from .serialization import Frame

__all__ = ["send_frames", "FrameReader", "Outbox", "ProtocolError", "MAX_FRAMES", "new_scratch",
           "Scratch", "frames_nbytes"]

MAX_FRAMES = 65536


def frames_nbytes(frames: Sequence[Frame]) -> int:
    """The bytes of a message's frames: bytes, or one-dimensional buffers of bytes (what
    ``dumps`` makes and the wire gives), whose ``len`` is their size."""
    return sum(map(len, frames))
#: Frames a message may have before its connection authenticated (a handshake has 5).
PREAUTH_FRAMES = 8
_COUNT = struct.Struct("<I")
_BIG = 256 * 1024  # frames at least this large are read into their own buffer
_CHUNK = 256 * 1024
_IOV_MAX = 512
_SMALL = 16 * 1024  # messages up to this size are joined into one bytes object
_SHM_MIN = 1 << 20  # frames this large go through a memfd on Unix sockets
_SHM_FLAG = 1 << 63
_MAX_FDS = 64
_ANCILLARY = socket.CMSG_SPACE(_MAX_FDS * array.array("i").itemsize)
_MSG_CTRUNC = int(socket.MSG_CTRUNC)  # a plain int: enum arithmetic costs ~1 us a message
_DONTWAIT = int(socket.MSG_DONTWAIT)


class ProtocolError(Exception):
    """The peer sent bytes that are not a well-formed message (or too large before auth)."""


@functools.lru_cache(maxsize=256)
def _header(n: int) -> struct.Struct:
    """Frame count and lengths of an ``n``-frame message."""
    return struct.Struct(f"<I{n}Q")


@functools.lru_cache(maxsize=256)
def _lengths_struct(n: int) -> struct.Struct:
    return struct.Struct(f"<{n}Q")


#: What a message becomes on the way out: buffers, and descriptors to send with them.
Encoded = Tuple[List[Frame], List[int]]


def encode(frames: Sequence[Frame], unix: bool = False) -> Encoded:
    """The buffers of one message (small ones joined) and the memfds of its big frames."""
    # one comprehension, not a call per frame: most frames are bytes (the hot path)
    lengths = [len(f) if type(f) is bytes else memoryview(f).nbytes for f in frames]
    total = sum(lengths)
    fds: List[int] = []
    body: Sequence[Frame] = frames
    if unix and total >= _SHM_MIN and memfd.AVAILABLE and max(lengths) >= _SHM_MIN:
        body = []
        total = 0
        for i, (frame, size) in enumerate(zip(frames, lengths)):
            if size >= _SHM_MIN and len(fds) < _MAX_FDS:
                try:
                    fds.append(memfd.to_memfd(frame, size))
                    lengths[i] = size | _SHM_FLAG
                    continue
                except OSError:  # (no memory for it, or its seals refused): in the body
                    pass
            body.append(frame)
            total += size
    header = _header(len(lengths)).pack(len(lengths), *lengths)
    if total <= _SMALL:
        return [header + b"".join(body)], fds
    return [header, *body], fds


def _close_all(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _rights(fds: Sequence[int]) -> List[Tuple[int, int, bytes]]:
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]


def _advance(bufs: Deque[Any], sent: int) -> None:
    while sent:
        head = bufs[0]
        if sent >= head.nbytes:
            sent -= head.nbytes
            bufs.popleft()
        else:
            bufs[0] = head[sent:]
            sent = 0
    while bufs and bufs[0].nbytes == 0:
        bufs.popleft()


def send_frames(sock: socket.socket, frames: Sequence[Frame], unix: Optional[bool] = None) -> int:
    """Write one message on a blocking socket (``unix``: whether it is an AF_UNIX one,
    which callers that send often pass: ``sock.family`` builds an enum at every call);
    returns the bytes written."""
    if unix is None:
        unix = sock.family == socket.AF_UNIX
    buffers, fds = encode(frames, unix)
    try:
        if len(buffers) == 1 and not fds:
            sock.sendall(buffers[0])
            return len(buffers[0])
        bufs: Deque[memoryview] = collections.deque(memoryview(b).cast("B") for b in buffers)
        ancillary = _rights(fds) if fds else []
        total = 0
        while bufs:
            sent = sock.sendmsg(list(bufs)[:_IOV_MAX], ancillary)
            total += sent
            _advance(bufs, sent)
            ancillary = []
        return total
    finally:
        if fds:
            _close_all(fds)


_Item = Union[memoryview, List[int]]


class Outbox:
    """Messages waiting to be written on a non-blocking socket."""

    def __init__(self, unix: bool = False, tls: bool = False) -> None:
        self.unix = unix
        #: Its socket is a `fiber.transport.tls.TlsSocket`: bytes it took may wait
        #: encrypted in it (its ``drain``) until it is writable.
        self.tls = tls
        self.items: Deque[_Item] = collections.deque()  # buffers, and fd lists before them
        self.nbytes = 0  # written so far (what the socket took)

    def add(self, frames: Sequence[Frame]) -> None:
        self._queue(*encode(frames, self.unix))

    def _queue(self, buffers: List[Frame], fds: List[int]) -> None:
        if fds:
            self.items.append(fds)
        self.items.extend(memoryview(b).cast("B") for b in buffers)

    def write(self, sock: socket.socket, frames: Sequence[Frame]) -> bool:
        """Add a message and write what the socket takes now; True when everything is
        written. A small message on a socket with nothing waiting (the usual case) goes
        out in one ``send`` without being queued."""
        buffers, fds = encode(frames, self.unix)
        if self.items or fds or len(buffers) != 1:
            self._queue(buffers, fds)
            return self.flush(sock)
        buf = buffers[0]
        try:
            sent = sock.send(buf)
        except (BlockingIOError, InterruptedError):
            sent = 0
        self.nbytes += sent
        if sent == len(buf):
            return not self.tls or sock.drain()  # type: ignore[attr-defined]
        self.items.append(memoryview(buf)[sent:])
        return False

    def flush(self, sock: socket.socket) -> bool:
        """Write what the socket takes now; True when everything is written."""
        items = self.items
        if self.tls:
            return self._flush_tls(sock)
        while items:
            bufs: List[memoryview] = []
            fds: List[int] = []
            for item in items:
                if isinstance(item, list):
                    fds.extend(item)
                else:
                    bufs.append(item)
                    if len(bufs) == _IOV_MAX:
                        break
            try:
                if fds:
                    sent = sock.sendmsg(bufs, _rights(fds))
                elif len(bufs) == 1:
                    sent = sock.send(bufs[0])
                else:
                    sent = sock.sendmsg(bufs)
            except (BlockingIOError, InterruptedError):
                return False
            self.nbytes += sent
            if fds:  # delivered with the first byte: ours can go
                _close_all(fds)
                self.items = items = collections.deque(
                    i for i in items if not isinstance(i, list))
            _advance(items, sent)
        return True

    def _flush_tls(self, sock: Any) -> bool:
        """`flush` on a `fiber.transport.tls.TlsSocket`: a buffer a ``send`` (which
        encrypts it), what it could not write yet written first (its ``drain``)."""
        items = self.items
        if not sock.drain():
            return False
        while items:
            try:
                sent = sock.send(items[0])
            except (BlockingIOError, InterruptedError):
                return False
            self.nbytes += sent
            _advance(items, sent)
        return bool(sock.drain())

    def queued(self) -> int:
        """The bytes waiting to be written (``nbytes`` once they are)."""
        return sum(item.nbytes for item in self.items if not isinstance(item, list))

    def close(self) -> None:
        _close_all([fd for item in self.items if isinstance(item, list) for fd in item])
        self.items.clear()


Scratch = Union[bytearray, mmap.mmap]


def new_scratch() -> Scratch:
    """A read buffer for `FrameReader` (``scratch``): an anonymous mapping, whose
    pages the kernel provides as reads first fill them. A ``bytearray`` is zeroed when
    made: 64 pages touched (and, in a forked job, 64 page faults) for a buffer whose
    reads are mostly a few hundred bytes."""
    return mmap.mmap(-1, _CHUNK)


class FrameReader:
    """Incremental parser of messages read from one socket."""

    def __init__(self, max_message: Optional[int] = None, unix: bool = False,
                 scratch: Optional[Scratch] = None, tls: bool = False) -> None:
        """``scratch``: the buffer each read goes into before it is parsed, shared by
        readers that are never fed at the same time (a server's, under its lock): one
        of its own is 256 KiB per connection. ``tls``: its socket is a
        `fiber.transport.tls.TlsSocket`, whose reads may leave plain bytes in it: each
        feed takes them all, since the descriptor no longer says they are there."""
        self.max_message = max_message  # a limit before the peer authenticated
        self.unix = unix
        if tls:
            self.feed_from = self._feed_tls  # type: ignore[method-assign]
        self._buf = bytearray()
        self._scratch = new_scratch() if scratch is None else scratch
        self._lengths: Optional[Sequence[int]] = None
        self._frames: List[Frame] = []
        self._big: Optional[bytearray] = None
        self._big_filled = 0
        self._fds: Deque[int] = collections.deque()
        self.messages: Deque[List[Frame]] = collections.deque()
        self.nbytes = 0  # read so far

    def _recv_into(self, sock: socket.socket, view: memoryview, flags: int) -> int:
        if not self.unix:
            return sock.recv_into(view, 0, flags)
        n, ancdata, flags, _ = sock.recvmsg_into([view], _ANCILLARY, flags)
        for level, kind, data in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
                self._fds.extend(fds)
        if flags & _MSG_CTRUNC:
            raise ProtocolError("too many descriptors in one message")
        return int(n)

    def feed_from(self, sock: socket.socket, flags: int = 0) -> bool:
        """Read what is available (one ``recv`` with ``flags``); False at end of stream.

        Raises:
            ProtocolError: malformed or over-limit message.
            BlockingIOError: nothing to read on a non-blocking socket (or with
                ``MSG_DONTWAIT``).
        """
        if self._big is not None:
            n = self._recv_into(sock, memoryview(self._big)[self._big_filled:], flags)
            if n == 0:
                return False
            self.nbytes += n
            self._big_filled += n
            if self._big_filled == len(self._big):
                self._frames.append(self._big)
                self._big = None
                self._parse()
            return True
        view = memoryview(self._scratch)
        if self.max_message is None:  # an authenticated peer's (the hot path)
            n = self._recv_into(sock, view, flags)
        else:
            # Before authentication, nothing but a handshake's bytes: what a stranger
            # sends costs this process at most ``preauth_bytes``, and a byte more
            # ends the connection (the rest stays in the kernel until it is closed).
            room = self.preauth_bytes - len(self._buf)
            n = self._recv_into(sock, view[:room + 1], flags)
            if n > room:
                raise ProtocolError("more than a handshake before authentication")
        if n == 0:
            return False
        self.nbytes += n
        self._buf += view[:n]
        self._parse()
        return True

    def _feed_tls(self, sock: Any, flags: int = 0) -> bool:
        """`feed_from` a `fiber.transport.tls.TlsSocket`: one read, then what it left
        in the socket's buffers."""
        alive = FrameReader.feed_from(self, sock, flags)
        while alive and sock.pending():
            try:
                alive = FrameReader.feed_from(self, sock, flags | _DONTWAIT)
            except BlockingIOError:  # (part of a record: the rest comes on the socket)
                break
        return alive

    @property
    def preauth_bytes(self) -> int:
        """The bytes buffered at most before authentication: a message of
        ``max_message`` bytes in ``PREAUTH_FRAMES`` frames, with its header."""
        return 4 + 8 * PREAUTH_FRAMES + (self.max_message or 0)

    def close(self) -> None:
        """Release descriptors received for messages that will never be parsed."""
        _close_all(self._fds)
        self._fds.clear()

    def _read_header(self, pos: int) -> int:
        """Read a message header at ``pos``; returns its size, or 0 if incomplete."""
        buf = self._buf
        if len(buf) - pos < 4:
            return 0
        (n,) = _COUNT.unpack_from(buf, pos)
        if n == 0 or n > MAX_FRAMES:
            raise ProtocolError(f"bad frame count {n}")
        if self.max_message is not None and n > PREAUTH_FRAMES:
            raise ProtocolError(f"{n} frames before authentication")
        size: int = 4 + 8 * n
        if len(buf) - pos < size:
            return 0
        lengths = _lengths_struct(n).unpack_from(buf, pos + 4)
        if self.max_message is not None and sum(lengths) > self.max_message:
            raise ProtocolError("message too large before authentication")
        self._lengths = lengths
        self._frames = []
        return size

    def _mapped(self, size: int) -> Union[mmap.mmap, bytearray]:
        if not self.unix or not self._fds:
            raise ProtocolError("a shared-memory frame without its descriptor")
        try:
            return memfd.receive(self._fds.popleft(), size)
        except ValueError as e:
            raise ProtocolError(str(e)) from None

    def _parse(self) -> None:
        buf = self._buf
        end = len(buf)  # buf changes only where this returns (the hot path: no len())
        pos = 0
        while True:
            if self._lengths is None:
                if pos == end:
                    break  # all parsed (the usual end): no header to look for
                size = self._read_header(pos)
                if not size:
                    break
                pos += size
            lengths = self._lengths
            assert lengths is not None
            frames = self._frames
            for i in range(len(frames), len(lengths)):
                size = lengths[i]
                if size & _SHM_FLAG:
                    frames.append(self._mapped(size & ~_SHM_FLAG))
                elif end - pos >= size:
                    frames.append(buf[pos:pos + size])
                    pos += size
                elif size >= _BIG:  # read the rest straight into the frame's own buffer
                    have = end - pos
                    big = bytearray(size)
                    big[:have] = buf[pos:]
                    del buf[:]
                    self._big, self._big_filled = big, have
                    return
                else:
                    del buf[:pos]
                    return
            self.messages.append(frames)
            self._lengths = None
            self._frames = []
        del buf[:pos]

