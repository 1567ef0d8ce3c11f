"""Many requests in flight on one connection, each answered into its own handle.

    caller threads                  AsyncChannel (one per server address and process)
    ──────────────                  ──────────────────────────────────────────────────
    h1 = call(...) ── [svc, op, id1, ...] ──▶ socket ──▶ server (answers in any order)
    h2 = call(...) ── [svc, op, id2, ...] ──▶
    h2.get() ── reads replies until id2's arrives; id1's is kept for h1 ◀── [id1|id2, ...]
    h1.get() ── already there

No helper thread: the first thread that needs a reply reads the socket for everyone (a
*leader*); other threads wait on a condition until the leader stored their reply or
stepped down. A call costs one write; a reply read by its own caller costs no thread hop.
If the connection is lost, every pending handle raises `ConnectionLost`.
"""

from __future__ import annotations

import itertools
import os
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .._core._clients import get_client, own_client
from ..errors import TimeoutError
from ..transport.client import Client, ConnectionLost
from ..transport.local import local_server
from ..transport.remote import unpack_exception
from ..transport.serialization import loads

__all__ = ["AsyncChannel", "CallHandle", "channel"]

Reply = Tuple[bytes, List[Any]]


#: Turns a reply (status, frames) into the value ``CallHandle.get`` returns.
Decode = Callable[[bytes, List[Any]], Any]


class AsyncChannel:
    """One authenticated connection shared by this process's threads, replies by id."""

    def __init__(self, address: str, timeout: Optional[float] = None) -> None:
        self.address = address
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: Dict[bytes, Reply] = {}
        self._discarded: Set[bytes] = set()
        self._reading = False
        self.error: Optional[BaseException] = None
        self._local = local_server(address)
        if self._local is None:
            # closed by prune_closed when its server is gone
            self._client: Optional[Client] = own_client(address, timeout)
        else:
            self._client = None

    @property
    def lost(self) -> bool:
        return self.error is not None or (self._client is not None and self._client.lost)

    def call(self, service: bytes, op: bytes, frames: Sequence[Any] = (),
             decode: Optional[Decode] = None, owner: Any = None) -> CallHandle:
        """Send a request now; its reply is read by the handle's ``get``, which returns
        ``decode(status, frames)`` (default: the unpickled value). ``owner`` is kept
        alive until the reply is read."""
        def handle(req_id: bytes, reply: Optional[Reply] = None,
                   error: Optional[BaseException] = None) -> CallHandle:
            return CallHandle(self, req_id, reply, error, decode, owner)

        if self._client is None:  # our own hub: the service answers synchronously
            try:
                reply = get_client(self.address).request(service, op, frames)
            except ConnectionLost as e:
                return handle(b"", error=e)
            return handle(b"", reply=reply)
        req_id = struct.pack("<Q", next(self._ids))
        try:
            with self._send_lock:
                self._client.send_message([service, op, req_id, *frames])
        except ConnectionLost as e:
            self._fail(e)
            return handle(req_id, error=e)
        return handle(req_id)

    def _fail(self, e: BaseException) -> None:
        with self._cond:
            if self.error is None:
                self.error = e
            self._cond.notify_all()

    def wait(self, req_id: bytes, timeout: Optional[float]) -> Optional[Reply]:
        """The reply to ``req_id``, or None after ``timeout`` s; reads as leader if needed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                reply = self._replies.pop(req_id, None)
                if reply is not None:
                    return reply
                if self.error is not None:
                    raise self.error
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                if self._reading:
                    self._cond.wait(left)
                    continue
                self._reading = True
                self._cond.release()
                try:
                    self._read_until(req_id, left)
                finally:
                    self._cond.acquire()
                    self._reading = False
                    self._cond.notify_all()

    def _read_until(self, req_id: bytes, timeout: Optional[float]) -> None:
        assert self._client is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                msg = self._client.receive(left)
            except ConnectionLost as e:
                self._fail(e)
                return
            if msg is None:
                return
            rid = bytes(msg[0])
            with self._cond:
                self._replies[rid] = (bytes(msg[1]), msg[2:])
                if rid in self._discarded:
                    self._discarded.discard(rid)
                    self._replies.pop(rid, None)
                self._cond.notify_all()
            if rid == req_id:
                return

    def discard(self, req_id: bytes) -> None:
        """A handle dropped unread: forget its reply when it comes (or now). Takes no
        lock: it runs from ``__del__``, possibly inside this channel's own code."""
        self._discarded.add(req_id)
        if self._replies.pop(req_id, None) is not None:
            self._discarded.discard(req_id)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


_channels: Dict[str, AsyncChannel] = {}
_channels_lock = threading.Lock()
_channels_pid = os.getpid()


def channel(address: str, timeout: Optional[float] = None) -> AsyncChannel:
    """This process's channel to ``address`` (a new one if the last was lost)."""
    global _channels_pid
    with _channels_lock:
        if _channels_pid != os.getpid():
            _channels.clear()
            _channels_pid = os.getpid()
        ch = _channels.get(address)
        if ch is None or ch.lost:
            if ch is not None:
                ch.close()
            ch = _channels[address] = AsyncChannel(address, timeout)
        return ch


class CallHandle:
    """The pending result of one asynchronous call; ``get`` returns it or raises.

    Handles of one channel may be read in any order and from any thread.
    """

    __slots__ = ("_channel", "_req_id", "_reply", "_error", "_decode", "_done", "_owner",
                 "__weakref__")

    def __init__(self, ch: AsyncChannel, req_id: bytes, reply: Optional[Reply] = None,
                 error: Optional[BaseException] = None, decode: Optional[Decode] = None,
                 owner: Any = None) -> None:
        self._channel = ch
        self._req_id = req_id
        self._reply = reply
        self._error = error
        self._decode = decode
        self._done = reply is not None or error is not None
        #: What must live until the reply is read: the proxy whose call this is (its
        #: collection would free the remote object, and end its job, before it answers).
        self._owner = owner

    def _fetch(self, timeout: Optional[float]) -> bool:
        if not self._done:
            try:
                reply = self._channel.wait(self._req_id, timeout)
            except ConnectionLost as e:
                self._error, self._done, self._owner = e, True, None
                return True
            if reply is None:
                return False
            self._reply, self._done, self._owner = reply, True, None
        return True

    def ready(self) -> bool:
        """Whether the result has arrived (never blocks)."""
        return self._fetch(0)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait until the result has arrived or ``timeout`` s passed."""
        self._fetch(timeout)

    def successful(self) -> bool:
        """Whether the call returned without raising.

        Raises:
            ValueError: the call has not completed yet.
        """
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return self._error is None and self._reply is not None and self._reply[0] != b"err"

    def get(self, timeout: Optional[float] = None) -> Any:
        """The call's result; re-raises the remote exception with its traceback.

        Raises:
            fiber.TimeoutError: no result within ``timeout`` s (the call goes on).
            ConnectionLost: the process serving the object is gone.
        """
        if not self._fetch(timeout):
            raise TimeoutError(f"no result within {timeout} s")
        if self._error is not None:
            raise self._error
        assert self._reply is not None
        status, frames = self._reply
        if status == b"err":
            raise unpack_exception(loads(frames))
        if self._decode is not None:
            return self._decode(status, frames)
        return loads(frames) if frames else None

    def __del__(self) -> None:
        if not self._done and self._req_id:
            try:
                self._channel.discard(self._req_id)
            except Exception:
                pass

    def __repr__(self) -> str:
        state = "ready" if self._done else "pending"
        return f"<fiber CallHandle {state} on {self._channel.address}>"
