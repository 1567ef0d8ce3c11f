"""``connection.wait``: the first of several pipe ends (and descriptors) to become ready.

A pipe end is ready when ``recv`` would not block: a message waits in its channel, or the
other end is closed everywhere. Its channel lives on the hub of the pipe's creator, so
readiness is known there, and only there; the hub's :class:`WaitService` holds one
request per waiting thread and hub, naming every end of that hub that the thread waits
for, and answers it when any of them becomes ready (:meth:`PipeService._serve` tells
it), or at the timeout::

    waiting thread ── [WAIT, b"any", req_id, wait, name, end, name, end ...] ──▶ hub
                   ◀─ [req_id, b"ok", indices of the ready ends] ───────────── (or b"empty")

Ends of one hub and nothing else: one request, which the thread waits for as for any
reply. Ends of several hubs, or with process sentinels and other descriptors: a request
to each hub, and the thread sleeps on a selector holding the remote hubs' connections,
a wake-up pipe for its own hub, and the descriptors. Requests still pending when it
returns are cancelled (``b"cancel"``) and their late replies dropped.
"""

from __future__ import annotations

import os
import selectors
import struct
import threading
import time
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .._core._served import decode_wait, encode_wait
from ..transport.client import Client, ConnectionLost, LateReply, get_client
from ..transport.server import Peer, Server, Service, Timer

if TYPE_CHECKING:
    from ._pipe import Connection, PipeService

__all__ = ["wait", "Watch", "WaitService", "WAIT_SERVICE", "ensure_service"]

#: The hub-wide service name (one per hub, registered with the hub's first pipe).
WAIT_SERVICE = b"~conn-wait"
_INDEX = struct.Struct("<I")


class Watch:
    """One waiting request: the (pipe service, end) pairs it waits for (None: no pipe)."""

    __slots__ = ("service", "server", "peer", "req_id", "ends", "timer")

    def __init__(self, service: WaitService, server: Server, peer: Peer, req_id: bytes,
                 ends: List[Tuple[Optional[PipeService], int]]) -> None:
        self.service = service
        self.server = server
        self.peer = peer
        self.req_id = req_id
        self.ends = ends
        self.timer: Optional[Timer] = None

    def ready(self) -> List[int]:
        """Indices of the ends ready now."""
        return [i for i, (pipe, end) in enumerate(self.ends) if pipe is None or pipe.ready(end)]

    def notify(self) -> None:
        """Called by a pipe when one of the ends named here is ready: answer."""
        self.service.finish(self, self.ready())


class WaitService(Service):
    """Holds waits for any of several pipe ends of this hub (runs under the hub's lock)."""

    def __init__(self) -> None:
        self.watches: List[Watch] = []

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        if op == b"cancel":
            for watch in self.watches:
                if watch.peer is peer and watch.req_id == bytes(payload[0]):
                    self.finish(watch, [])
                    return
            return
        if op != b"any":
            raise ValueError(f"unknown wait operation {op!r}")
        wait = decode_wait(payload[0])
        pairs = payload[1:]
        ends: List[Tuple[Optional[PipeService], int]] = []
        for i in range(0, len(pairs) - 1, 2):
            # Not a pipe here (unregistered, or never one): ready, so that recv tells why.
            ends.append((_pipe(server, bytes(pairs[i])), bytes(pairs[i + 1])[0] - 48))
        watch = Watch(self, server, peer, req_id, ends)
        ready = watch.ready()
        if ready or wait == 0:
            self._reply(watch, ready)
            return
        for pipe, end in ends:
            assert pipe is not None
            pipe.watchers[end].append(watch)
        if wait is not None:
            watch.timer = server.call_later(wait, lambda: self.finish(watch, []))
        self.watches.append(watch)

    def finish(self, watch: Watch, ready: List[int]) -> None:
        """Answer ``watch`` with the indices of its ready ends (none: timeout or cancel)."""
        if watch in self.watches:
            self._drop(watch)
            self._reply(watch, ready)

    def _drop(self, watch: Watch) -> None:
        self.watches.remove(watch)
        if watch.timer is not None:
            watch.timer.cancel()
        for pipe, end in watch.ends:
            if pipe is not None:
                pipe.watchers[end][:] = [w for w in pipe.watchers[end] if w is not watch]

    @staticmethod
    def _reply(watch: Watch, ready: List[int]) -> None:
        if ready:
            watch.server.reply(watch.peer, watch.req_id, b"ok",
                               [b"".join(_INDEX.pack(i) for i in ready)])
        else:
            watch.server.reply(watch.peer, watch.req_id, b"empty")

    def peer_gone(self, server: Server, peer: Peer) -> None:
        for watch in [w for w in self.watches if w.peer is peer]:
            self._drop(watch)


def _pipe(server: Server, name: bytes) -> Optional[PipeService]:
    from ._pipe import PipeService

    service = server.service(name)
    return service if isinstance(service, PipeService) else None


_service_lock = threading.Lock()


def ensure_service(hub: Server) -> None:
    """Register the hub's wait service (with its first pipe)."""
    with _service_lock:
        if hub.service(WAIT_SERVICE) is None:
            hub.register(WAIT_SERVICE, WaitService())


# -- the caller's side ---------------------------------------------------------------------


def _frames(conns: Sequence[Connection], timeout: Optional[float]) -> List[Any]:
    frames: List[Any] = [encode_wait(True, timeout)]
    for c in conns:
        frames += [c._name, c._tag()]
    return frames


def _indices(status: bytes, frames: List[Any]) -> List[int]:
    if status != b"ok":
        return []
    data = bytes(frames[0])
    return [_INDEX.unpack_from(data, i)[0] for i in range(0, len(data), _INDEX.size)]


def wait(object_list: Iterable[Any], timeout: Optional[float] = None) -> List[Any]:
    """The objects of ``object_list`` that are ready, waiting up to ``timeout`` s (None:
    until one is). Accepts fiber Connections (ready when ``recv`` would not block),
    process sentinels, and other file descriptors or objects with ``fileno()``.

    Raises:
        OSError: a connection is closed or write-only (as multiprocessing).
    """
    from ._pipe import Connection

    objects = list(object_list)
    by_hub: Dict[str, List[Connection]] = {}
    others = []
    for o in objects:
        if isinstance(o, Connection):
            o._check_readable()
            by_hub.setdefault(o._address, []).append(o)
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
        status, frames = client.request(WAIT_SERVICE, b"any", _frames(conns, timeout))
    except ConnectionLost:
        return {id(c) for c in conns}  # their hub is gone: recv raises EOFError at once
    if status == b"err":
        from ..transport.remote import unpack_exception
        from ..transport.serialization import loads

        raise unpack_exception(loads(frames))
    return {id(conns[i]) for i in _indices(status, frames)}


class _Multiplexed:
    """A wait over several hubs and descriptors (see the module docstring)."""

    def __init__(self, by_hub: Dict[str, List[Connection]], others: List[Any]) -> None:
        self.by_hub = by_hub
        self.others = others
        self.ready: Set[int] = set()
        self.answered: Set[str] = set()
        self.pending: Dict[str, Tuple[Any, bytes]] = {}  # address -> (client, req_id)
        self.lock = threading.Lock()  # replies from the own hub come on any thread
        self.wake_r = self.wake_w = -1

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
            finally:
                self._cancel()  # the own hub's reply, if any, is delivered by now
                if self.wake_r >= 0:
                    os.close(self.wake_r)
                    os.close(self.wake_w)
        return self.ready

    def _start(self, sel: selectors.BaseSelector, timeout: Optional[float]) -> None:
        for address, conns in self.by_hub.items():
            try:
                client = get_client(address)
                if isinstance(client, Client):
                    sel.register(client.sock, selectors.EVENT_READ, client)
                elif self.wake_r < 0:  # the own hub: its reply may come on another thread
                    self.wake_r, self.wake_w = os.pipe()
                    os.set_blocking(self.wake_w, False)
                    sel.register(self.wake_r, selectors.EVENT_READ, None)
                req_id = client.start(WAIT_SERVICE, b"any", _frames(conns, timeout),
                                      self._on_reply(address))
            except ConnectionLost:  # the hub is gone: recv raises EOFError at once
                self.ready.update(id(c) for c in conns)
                continue
            with self.lock:
                if address not in self.answered:  # not answered at once
                    self.pending[address] = (client, req_id)

    def _on_reply(self, address: str) -> LateReply:
        def on_reply(status: bytes, frames: List[Any]) -> None:
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

    def _on_event(self, data: Any) -> None:
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

    def _cancel(self) -> None:
        with self.lock:
            pending, self.pending = self.pending, {}
        for client, req_id in pending.values():
            try:
                client.send(WAIT_SERVICE, b"cancel", [req_id])
            except ConnectionLost:
                pass
