"""Many requests in flight on one connection, each answered into its own handle, with no
helper thread; a call that can be asked again survives a connection's reset. The design:
docs/contributing/transport.md, "Managers: calls in flight"."""

from __future__ import annotations

import itertools
import os
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from .._core._clients import get_client, own_client
from .._process_state import here
from ..errors import TimeoutError
from ..transport.client import Client, ConnectionLost, again_on_a_new_connection
from ..transport.local import local_server
from ..transport.receipts import make_ticket
from ..transport.remote import unpack_exception
from ..transport.serialization import Frame, loads

__all__ = ["AsyncChannel", "CallHandle", "channel"]

Reply = Tuple[bytes, List[Any]]
#: Calls in flight on one channel that can be asked again (a slot each); more are made
#: as calls that are not (as an object's creation).
_SLOTS = 1 << 16


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
        #: Calls sent and not answered yet: what to send again after a reset (None:
        #: not to be asked again), by request id, in the order they were sent.
        self._in_flight: Dict[bytes, Optional[Tuple[bytes, bytes, Sequence[Any]]]] = {}
        #: Calls that a reset cut off and that were not asked again, with the error.
        self._failed: Dict[bytes, BaseException] = {}
        self._key = os.urandom(6)  # + a slot (u16): a ticket's key (see the module doc)
        self._slots: List[int] = []  # each slot's last ticket count
        self._free: List[int] = []
        self._local = local_server(address)
        if self._local is None:
            # closed by prune_closed when its server is gone
            self._client: Optional[Client] = own_client(address, timeout)
        else:
            self._client = None
        #: Whether a link may reset the connection (TCP): then calls are kept until
        #: answered, to be asked again (a Unix socket's end is its server's).
        self._tracked = self._client is not None and self._client.may_reset

    @property
    def lost(self) -> bool:
        return self.error is not None

    def call(self, service: bytes, op: bytes, frames: Sequence[Frame] = (),
             decode: Optional[Decode] = None, owner: object = None,
             again: bool = False) -> CallHandle:
        """Send a request now; its reply is read by the handle's ``get``, which returns
        ``decode(status, frames)`` (default: the unpickled value). ``owner`` is kept
        alive until the reply is read. ``again``: the service answers every request it
        took, so the call is asked again on a new connection if a reset cuts it off."""
        def handle(req_id: bytes, reply: Optional[Reply] = None,
                   error: Optional[BaseException] = None) -> CallHandle:
            return CallHandle(self, req_id, reply, error, decode, owner)

        if self._client is None:  # our own hub: the service answers synchronously
            try:
                reply = get_client(self.address).request(service, op, frames)
            except ConnectionLost as e:
                return handle(b"", error=e)
            return handle(b"", reply=reply)
        with self._send_lock:
            if self.error is not None:
                return handle(b"", error=self.error)
            client = self._client
            if self._tracked:
                with self._cond:
                    again = again and (bool(self._free) or len(self._slots) < _SLOTS)
                    req_id = self._ticket() if again else struct.pack("<Q", next(self._ids))
                    self._in_flight[req_id] = (service, op, frames) if again else None
            else:
                req_id = struct.pack("<Q", next(self._ids))
            try:
                client.send_message([service, op, req_id, *frames])
            except ConnectionLost as e:
                cause = e  # asked again, or failed, by _recover
            else:
                return handle(req_id)
        self._recover(client, cause)
        return handle(req_id)

    def _ticket(self) -> bytes:
        """(under the condition's lock) A ticket on a free slot (see the module doc)."""
        if self._free:
            slot = self._free.pop()
        else:
            slot = len(self._slots)
            self._slots.append(0)
        self._slots[slot] += 1
        return make_ticket(self._key + slot.to_bytes(2, "little"), self._slots[slot])

    def _answered(self, req_id: bytes) -> None:
        """(under the condition's lock) ``req_id``'s reply came: if it had a slot, the
        slot is free again."""
        if self._in_flight.pop(req_id) is not None:
            self._free.append(int.from_bytes(req_id[6:8], "little"))

    def _recover(self, failed: Client, cause: ConnectionLost) -> None:
        """The connection ``failed`` broke (``cause``) under calls in flight: on a new
        one, those that may be asked again are (in their order); the others fail. If no
        new connection can be made, or none is kept (a Unix socket), every call fails."""
        with self._send_lock:
            if self._client is not failed or self.error is not None:
                return  # another thread did it
            try:
                if not self._tracked:  # nothing kept to ask again: every call fails
                    raise cause
                again_on_a_new_connection(self._reconnect)
                error = None
            except ConnectionLost as e:
                error = e
            except Exception as e:  # e.g. the server's secret no longer proved
                error = ConnectionLost(f"cannot connect again: {e}", self.address)
            with self._cond:
                if error is not None:
                    for rid in self._in_flight:
                        self._fail_call(rid, error)
                    self._in_flight.clear()
                    self.error = error
                self._cond.notify_all()

    def _fail_call(self, rid: bytes, error: BaseException) -> None:
        """(under the condition's lock) The call ``rid`` failed: its handle raises
        ``error``, unless it was dropped unread."""
        if rid in self._discarded:
            self._discarded.discard(rid)
        else:
            self._failed[rid] = error

    def _reconnect(self) -> None:
        """(under the send lock) A new connection, and the calls in flight asked again
        on it; those that may not be fail with the old connection's error."""
        old = self._client
        assert old is not None
        old.close()
        self._client = client = own_client(self.address)
        with self._cond:
            for rid in [rid for rid, call in self._in_flight.items() if call is None]:
                del self._in_flight[rid]
                self._fail_call(rid, ConnectionLost(
                    "connection reset under the call (it is not asked again)", self.address))
            calls = list(self._in_flight.items())
            self._cond.notify_all()
        for rid, call in calls:
            assert call is not None
            client.send_message([call[0], call[1], rid, *call[2]])

    def wait(self, req_id: bytes, timeout: Optional[float]) -> Optional[Reply]:
        """The reply to ``req_id``, or None after ``timeout`` s; reads as leader if needed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                reply = self._replies.pop(req_id, None)
                if reply is not None:
                    return reply
                failed = self._failed.pop(req_id, None)
                if failed is not None:
                    raise failed
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
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            client = self._client
            assert client is not None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                msg = client.receive(left)
            except ConnectionLost as e:
                self._recover(client, e)
                if self.error is not None or req_id in self._failed:
                    return
                continue
            if msg is None:
                return
            rid = bytes(msg[0])
            with self._cond:
                if self._tracked:
                    if rid not in self._in_flight:
                        continue  # a second answer: read on the old connection, asked again
                    self._answered(rid)
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
        if (self._replies.pop(req_id, None) is not None
                or self._failed.pop(req_id, None) is not None):
            self._discarded.discard(req_id)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


@here.after_fork_in_child
def _forget_channels() -> None:
    """A forked child's channels are its own: its parent's connections are not."""
    here.api.manager_channels.clear()
    here.api.manager_channels_lock = threading.Lock()


def channel(address: str, timeout: Optional[float] = None) -> AsyncChannel:
    """This process's channel to ``address`` (a new one if the last was lost)."""
    api = here.api
    with api.manager_channels_lock:
        ch = api.manager_channels.get(address)
        if ch is None or ch.lost:
            if ch is not None:
                ch.close()
            ch = api.manager_channels[address] = AsyncChannel(address, timeout)
        return ch


class CallHandle:
    """The pending result of one asynchronous call; ``get`` returns it or raises.

    Handles of one channel may be read in any order and from any thread.
    """

    __slots__ = ("_channel", "_req_id", "_reply", "_error", "_decode", "_done", "_owner",
                 "__weakref__")

    def __init__(self, ch: AsyncChannel, req_id: bytes, reply: Optional[Reply] = None,
                 error: Optional[BaseException] = None, decode: Optional[Decode] = None,
                 owner: object = None) -> None:
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
