"""``connection.wait``: the first of several pipe ends (and descriptors) to become ready.
Readiness is known on the hub of each pipe's creator, which holds one request per waiting
thread. The design: docs/contributing/transport.md, "Waiting on several ends"."""

from __future__ import annotations

import os
import selectors
import threading
import time
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar

from .._core._clients import get_client
from .._core._served import wait_seconds
from ..transport.client import Cancel, Client, ConnectionLost
from ..transport.local import Channel, LateReply
from ..transport.operations import reply_of
from ..transport.remote import unpack_exception
from ..transport.serialization import Frame, loads
from ._pipe import Connection, waited_end
from ._watch import WAIT_SERVICE, Ready, WaitAny, WaitOps

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

#: What `wait` takes: a fiber Connection, a descriptor, or an object with ``fileno()``.
_Waitable = TypeVar("_Waitable", bound="FileDescriptorLike")

__all__ = ["wait"]

def _frames(conns: Sequence[Connection], timeout: Optional[float]) -> List[Frame]:
    return WaitAny(wait_seconds(True, timeout), [waited_end(c) for c in conns]).frames()


def _indices(status: bytes, frames: Sequence[Frame]) -> List[int]:
    if status != b"ok":
        return []
    return reply_of(Ready, frames).indices


def wait(object_list: Iterable[_Waitable], timeout: Optional[float] = None
         ) -> List[_Waitable]:
    """The objects of ``object_list`` that are ready, waiting up to ``timeout`` s (None:
    until one is). Accepts fiber Connections (ready when ``recv`` would not block),
    process sentinels, and other file descriptors or objects with ``fileno()``.

    Raises:
        OSError: a connection is closed or write-only (as multiprocessing).
    """
    objects = list(object_list)
    by_hub: Dict[str, List[Connection]] = {}
    others = []
    for o in objects:
        if isinstance(o, Connection):
            waited_end(o)  # raises OSError if it cannot be waited on
            by_hub.setdefault(o.hub_address, []).append(o)
        else:
            others.append(o)
    if timeout is not None:
        timeout = max(0.0, timeout)
    if len(by_hub) == 1 and not others:
        (address, conns), = by_hub.items()
        ready = _wait_one_hub(address, conns, timeout)
    else:
        ready = _Multiplexed(by_hub, others).wait(timeout)
    return [o for o in objects if id(o) in ready]


def _wait_one_hub(address: str, conns: List[Connection],
                  timeout: Optional[float]) -> Set[int]:
    try:
        client = get_client(address)
        status, frames = client.request(WAIT_SERVICE, WaitOps.ANY, _frames(conns, timeout))
    except ConnectionLost:
        return {id(c) for c in conns}  # their hub is gone: recv raises EOFError at once
    if status == b"err":
        raise unpack_exception(loads(frames))
    return {id(conns[i]) for i in _indices(status, frames)}


def _ready_now(conn: Connection) -> bool:
    try:
        return conn.poll(0)
    except (OSError, EOFError):  # recv raises it at once: ready, as a closed pipe is
        return True


class _Multiplexed:
    """A wait over several hubs and descriptors (see the module docstring)."""

    def __init__(self, by_hub: Dict[str, List[Connection]],
                 others: Sequence[FileDescriptorLike]) -> None:
        self.by_hub = by_hub
        self.others = others
        self.ready: Set[int] = set()
        self.answered: Set[str] = set()
        self.pending: Dict[str, Tuple[Channel, bytes]] = {}  # address -> (client, req_id)
        self.lock = threading.Lock()  # replies from the own hub come on any thread
        self.wake_r = self.wake_w = -1
        #: The wait's own copies of the hubs' sockets, watched in their place: a client
        #: can be closed under the wait (`prune_closed`, by the next hub's `get_client`
        #: or another thread's), and its number then taken by a new socket: the selector
        #: would lose the hub's end (the wait hung) or refuse the new one (KeyError).
        self.watched: List[int] = []

    def wait(self, timeout: Optional[float]) -> Set[int]:
        deadline = None if timeout is None else time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            for o in self.others:
                sel.register(o, selectors.EVENT_READ, o)
            try:
                self._start(sel, timeout)
                while True:
                    with self.lock:
                        if self.ready or not (self.pending or self.others):
                            break
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    for key, _ in sel.select(left):
                        self._on_event(key.data)
                    if left == 0:
                        break
                if self.ready:  # as multiprocessing's: all that are ready, not the first
                    for key, _ in sel.select(0):
                        self._on_event(key.data)
            finally:
                unanswered = self._cancel()  # the own hub's reply is delivered by now
                if self.wake_r >= 0:
                    os.close(self.wake_r)
                    os.close(self.wake_w)
                for fd in self.watched:
                    sel.unregister(fd)
                    os.close(fd)
        if self.ready:
            for address in unanswered:  # its connections ready now count too
                self.ready.update(id(c) for c in self.by_hub[address] if _ready_now(c))
        return self.ready

    def _start(self, sel: selectors.BaseSelector, timeout: Optional[float]) -> None:
        for address, conns in self.by_hub.items():
            try:
                client = get_client(address)
                if isinstance(client, Client):
                    fd = os.dup(client.sock.fileno())
                    self.watched.append(fd)
                    sel.register(fd, selectors.EVENT_READ, client)
                elif self.wake_r < 0:  # the own hub: its reply may come on another thread
                    self.wake_r, self.wake_w = os.pipe()
                    os.set_blocking(self.wake_w, False)
                    sel.register(self.wake_r, selectors.EVENT_READ, None)
                req_id = client.start(WAIT_SERVICE, WaitOps.ANY, _frames(conns, timeout),
                                      self._on_reply(address))
            except (ConnectionLost, OSError):  # the hub is gone: recv raises EOFError now
                self.ready.update(id(c) for c in conns)
                continue
            with self.lock:
                if address not in self.answered:  # not answered at once
                    self.pending[address] = (client, req_id)

    def _on_reply(self, address: str) -> LateReply:
        def on_reply(status: bytes, frames: Sequence[Frame]) -> None:
            conns = self.by_hub[address]
            with self.lock:
                self.answered.add(address)
                self.pending.pop(address, None)
                if status == b"err":  # recv or poll raises the error
                    self.ready.update(id(c) for c in conns)
                else:
                    self.ready.update(id(conns[i]) for i in _indices(status, frames))
            if self.wake_w >= 0:
                try:
                    os.write(self.wake_w, b"x")
                except OSError:
                    pass  # already awake
        return on_reply

    def _on_event(self, data: object) -> None:
        if isinstance(data, Client):
            try:
                data.serve_late()
            except ConnectionLost:
                for address, (client, _) in list(self.pending.items()):
                    if client is data:
                        self._on_reply(address)(b"err", [])
        elif data is None:
            os.read(self.wake_r, 4096)
        else:
            self.ready.add(id(data))

    def _cancel(self) -> List[str]:
        """Cancel the hubs' waits not answered yet; their addresses."""
        with self.lock:
            pending, self.pending = self.pending, {}
        for client, req_id in pending.values():
            try:
                client.send(WAIT_SERVICE, WaitOps.CANCEL, Cancel(req_id).frames())
            except ConnectionLost:
                pass
        return list(pending)
