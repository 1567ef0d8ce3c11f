"""Messages on a byte stream: a message is a list of frames.

Wire format of one message::

    uint32 n | uint64 len_1 ... uint64 len_n | frame_1 ... frame_n      (little endian)

Frames are written with ``sendmsg`` straight from the caller's buffers (no copy into a
joined string) and large frames are read with ``recv_into`` straight into a ``bytearray``
of their size: one copy from the kernel, and a writable buffer for numpy at the end.
"""

from __future__ import annotations

import collections
import socket
import struct
from typing import Any, Deque, List, Optional, Sequence

__all__ = ["pack", "send_frames", "FrameReader", "Outbox", "ProtocolError", "MAX_FRAMES"]

MAX_FRAMES = 65536
_COUNT = struct.Struct("<I")
_BIG = 256 * 1024  # frames at least this large are read into their own buffer
_CHUNK = 256 * 1024
_IOV_MAX = 512


class ProtocolError(Exception):
    """The peer sent bytes that are not a well-formed message (or too large before auth)."""


_HEADERS: dict = {}


def _nbytes(frame: Any) -> int:
    return len(frame) if type(frame) is bytes else memoryview(frame).nbytes


def pack(frames: Sequence[Any]) -> List[Any]:
    """The buffers to write for one message: header, then the frames as they are."""
    n = len(frames)
    header = _HEADERS.get(n)
    if header is None:
        header = _HEADERS[n] = struct.Struct(f"<I{n}Q")
    return [header.pack(n, *map(_nbytes, frames)), *frames]


def _advance(bufs: Deque[memoryview], sent: int) -> None:
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


def _views(buffers: Sequence[Any]) -> Deque[memoryview]:
    return collections.deque(memoryview(b).cast("B") for b in buffers)


_SMALL = 16 * 1024


def pack_small(frames: Sequence[Any]) -> Optional[bytes]:
    """One message as a single bytes object, when it is small (cheaper to write)."""
    lengths = list(map(_nbytes, frames))
    if sum(lengths) > _SMALL:
        return None
    n = len(frames)
    header = _HEADERS.get(n)
    if header is None:
        header = _HEADERS[n] = struct.Struct(f"<I{n}Q")
    return header.pack(n, *lengths) + b"".join(frames)


def send_frames(sock: socket.socket, frames: Sequence[Any]) -> None:
    """Write one message on a blocking socket."""
    small = pack_small(frames)
    if small is not None:
        sock.sendall(small)
        return
    buffers = pack(frames)
    if len(buffers) <= _IOV_MAX:
        total = sum(map(_nbytes, buffers))
        sent = sock.sendmsg(buffers)
        if sent == total:
            return
        bufs = _views(buffers)
        _advance(bufs, sent)
    else:
        bufs = _views(buffers)
    while bufs:
        _advance(bufs, sock.sendmsg(list(bufs)[:_IOV_MAX]))


class Outbox:
    """Messages waiting to be written on a non-blocking socket."""

    def __init__(self) -> None:
        self.bufs: Deque[memoryview] = collections.deque()

    def add(self, frames: Sequence[Any]) -> None:
        small = pack_small(frames)
        if small is not None:
            self.bufs.append(memoryview(small))
        else:
            self.bufs.extend(_views(pack(frames)))

    def flush(self, sock: socket.socket) -> bool:
        """Write what the socket takes now; True when everything is written."""
        bufs = self.bufs
        while bufs:
            try:
                if len(bufs) == 1:
                    sent = sock.send(bufs[0])
                else:
                    sent = sock.sendmsg(list(bufs)[:_IOV_MAX])
            except (BlockingIOError, InterruptedError):
                return False
            _advance(bufs, sent)
        return True


class FrameReader:
    """Incremental parser of messages read from one socket."""

    def __init__(self, max_message: Optional[int] = None) -> None:
        self.max_message = max_message  # a limit before the peer authenticated
        self._buf = bytearray()
        self._scratch = bytearray(_CHUNK)
        self._lengths: Optional[Sequence[int]] = None
        self._frames: List[Any] = []
        self._big: Optional[bytearray] = None
        self._big_filled = 0
        self.messages: Deque[List[Any]] = collections.deque()

    def feed_from(self, sock: socket.socket) -> bool:
        """Read what is available (one ``recv``); False at end of stream.

        Raises:
            ProtocolError: malformed or over-limit message.
            BlockingIOError: nothing to read on a non-blocking socket.
        """
        if self._big is not None:
            n = sock.recv_into(memoryview(self._big)[self._big_filled:])
            if n == 0:
                return False
            self._big_filled += n
            if self._big_filled == len(self._big):
                self._frames.append(self._big)
                self._big = None
                self._parse()
            return True
        n = sock.recv_into(self._scratch)
        if n == 0:
            return False
        self._buf += memoryview(self._scratch)[:n]
        self._parse()
        return True

    def _header(self, pos: int) -> int:
        """Read a message header at ``pos``; returns its size, or 0 if incomplete."""
        buf = self._buf
        if len(buf) - pos < 4:
            return 0
        (n,) = _COUNT.unpack_from(buf, pos)
        if n == 0 or n > MAX_FRAMES:
            raise ProtocolError(f"bad frame count {n}")
        size = 4 + 8 * n
        if len(buf) - pos < size:
            return 0
        lengths = _lengths_struct(n).unpack_from(buf, pos + 4)
        if self.max_message is not None and sum(lengths) > self.max_message:
            raise ProtocolError("message too large before authentication")
        self._lengths = lengths
        self._frames = []
        return size

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        while True:
            if self._lengths is None:
                size = self._header(pos)
                if not size:
                    break
                pos += size
            lengths = self._lengths
            assert lengths is not None
            frames = self._frames
            while len(frames) < len(lengths):
                size = lengths[len(frames)]
                if len(buf) - pos >= size:
                    frames.append(buf[pos:pos + size])
                    pos += size
                elif size >= _BIG:  # read the rest straight into the frame's own buffer
                    have = len(buf) - pos
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


_LENGTHS: dict = {}


def _lengths_struct(n: int) -> struct.Struct:
    st = _LENGTHS.get(n)
    if st is None:
        st = _LENGTHS[n] = struct.Struct(f"<{n}Q")
    return st
