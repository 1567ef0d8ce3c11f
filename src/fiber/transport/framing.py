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


def send_frames(sock: socket.socket, frames: Sequence[Any]) -> None:
    """Write one message on a blocking socket."""
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
        self.bufs.extend(_views(pack(frames)))

    def flush(self, sock: socket.socket) -> bool:
        """Write what the socket takes now; True when everything is written."""
        while self.bufs:
            try:
                sent = sock.sendmsg(list(self.bufs)[:_IOV_MAX])
            except (BlockingIOError, InterruptedError):
                return False
            _advance(self.bufs, sent)
        return True


class FrameReader:
    """Incremental parser of messages read from one socket."""

    def __init__(self, max_message: Optional[int] = None) -> None:
        self.max_message = max_message  # a limit before the peer authenticated
        self._buf = bytearray()
        self._lengths: Optional[List[int]] = None
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
            view = memoryview(self._big)[self._big_filled:]
            n = sock.recv_into(view)
            if n == 0:
                return False
            self._big_filled += n
            if self._big_filled == len(self._big):
                self._frames.append(self._big)
                self._big = None
                self._parse()
            return True
        data = sock.recv(_CHUNK)
        if not data:
            return False
        self._buf += data
        self._parse()
        return True

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        while True:
            if self._lengths is None:
                if len(buf) - pos < 4:
                    break
                (n,) = _COUNT.unpack_from(buf, pos)
                if n == 0 or n > MAX_FRAMES:
                    raise ProtocolError(f"bad frame count {n}")
                if len(buf) - pos < 4 + 8 * n:
                    break
                lengths = list(struct.unpack_from(f"<{n}Q", buf, pos + 4))
                if self.max_message is not None and sum(lengths) > self.max_message:
                    raise ProtocolError("message too large before authentication")
                pos += 4 + 8 * n
                self._lengths = lengths
                self._frames = []
            while len(self._frames) < len(self._lengths):
                size = self._lengths[len(self._frames)]
                have = len(buf) - pos
                if have >= size:
                    self._frames.append(bytes(buf[pos:pos + size]) if size < _BIG
                                        else bytearray(buf[pos:pos + size]))
                    pos += size
                elif size >= _BIG:
                    big = bytearray(size)
                    big[:have] = buf[pos:]
                    pos += have
                    self._big, self._big_filled = big, have
                    del buf[:pos]
                    return
                else:
                    del buf[:pos]
                    return
            self.messages.append(self._frames)
            self._lengths = None
            self._frames = []
        del buf[:pos]
