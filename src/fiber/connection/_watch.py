"""The hub's side of ``connection.wait``: requests that wait for any of several ends.

A pipe end is ready when ``recv`` would not block: a message waits in its channel, or the
other end is closed everywhere. Its channel lives on the hub of the pipe's creator, so
readiness is known there, and only there; the hub's `WaitService` holds one
request per waiting thread and hub, naming every end of that hub that the thread waits
for, and answers it when any of them becomes ready (a `Watched` service, such as
a pipe's, tells it), or at the timeout. The caller's side is `_wait`.
"""

from __future__ import annotations

import struct
from typing import List, NamedTuple, Optional, Sequence, Tuple

from .._core._served import decode_wait, pack_wait
from ..transport.client import Cancel
from ..transport.operations import handles
from ..transport.serialization import Frame
from ..transport.server import Peer, Server, Service, Timer

__all__ = ["Watched", "Watch", "WaitService", "WaitOps", "WAIT_SERVICE", "ensure_service",
           "Ready", "WaitAny", "end_tag", "end_of",
           "END_TAGS"]

#: The hub-wide service name (one per hub, registered with the hub's first pipe).
WAIT_SERVICE = b"~conn-wait"
_INDEX = struct.Struct("<I")


class Ready(NamedTuple):
    """The ``ok`` answer to a `WaitAny`: its ready ends, by their index in it (one frame
    of u32s)."""

    indices: List[int]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Ready:
        return cls([i for (i,) in _INDEX.iter_unpack(payload[0])])

    def frames(self) -> List[Frame]:
        return [b"".join(_INDEX.pack(i) for i in self.indices)]


#: The frames that name a pipe's end 0 and end 1 in a request (`end_tag`).
END_TAGS = (b"0", b"1")


def end_tag(end: int) -> bytes:
    """The frame that names a pipe's ``end`` (0 or 1) in a request: b"0" or b"1"."""
    return END_TAGS[end]


def end_of(frame: Frame) -> int:
    """The end a request's frame names (`end_tag`).

    Raises:
        ValueError: the frame names no end.
    """
    end = frame[0] - 48
    if (end != 0 and end != 1) or len(frame) != 1:
        raise ValueError(f"not a pipe's end: {bytes(frame)[:8]!r}")
    return end


class Watched(Service):
    """A service whose ends a `Watch` can wait for (a pipe's)."""

    #: Per end, the watches waiting for it (see `notify_watchers`).
    watchers: Tuple[List[Watch], ...]

    def ready(self, end: int) -> bool:
        """Whether ``end`` is ready now."""
        raise NotImplementedError

    def notify_watchers(self, end: int) -> None:
        """Call after ``end`` may have become ready: the watches waiting for it answer."""
        if self.watchers[end] and self.ready(end):
            for watch in list(self.watchers[end]):
                watch.notify()


class Watch:
    """One waiting request: the (pipe service, end) pairs it waits for (None: no pipe)."""

    __slots__ = ("service", "server", "peer", "req_id", "ends", "timer")

    def __init__(self, service: WaitService, server: Server, peer: Peer, req_id: bytes,
                 ends: List[Tuple[Optional[Watched], int]]) -> None:
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


class WaitOps:
    """The wait protocol's operations (requests to a hub's `WaitService`)."""

    ANY = b"any"  # `WaitAny`: answered when one of its ends is ready
    CANCEL = b"cancel"  # `Cancel` (transport.client): the ANY request given up


class WaitAny(NamedTuple):
    """``any``: how long the hub may hold the request (as `fiber._core._served.Wait`'s
    seconds), and the ends waited for, each its pipe's service name and end
    (``[wait, name, end, name, end...]``)."""

    wait: Optional[float]
    ends: List[Tuple[bytes, int]]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> WaitAny:
        if len(payload) % 2 != 1:
            raise ValueError(f"a wait names (service, end) pairs, not {len(payload) - 1} "
                             "frames")
        return cls(decode_wait(payload[0]),
                   [(bytes(payload[i]), end_of(payload[i + 1]))
                    for i in range(1, len(payload), 2)])

    def frames(self) -> List[Frame]:
        frames: List[Frame] = [pack_wait(self.wait)]
        for name, end in self.ends:
            frames += (name, end_tag(end))
        return frames


class WaitService(Service):
    """Holds waits for any of several pipe ends of this hub (runs under the hub's lock)."""

    protocol = "wait"

    def __init__(self) -> None:
        self.watches: List[Watch] = []

    @handles(WaitOps.CANCEL, Cancel)
    def cancel(self, server: Server, peer: Peer, req_id: bytes, msg: Cancel) -> None:
        for watch in self.watches:
            if watch.peer is peer and watch.req_id == msg.req_id:
                self.finish(watch, [])
                return

    @handles(WaitOps.ANY, WaitAny)
    def wait_any(self, server: Server, peer: Peer, req_id: bytes, msg: WaitAny) -> None:
        wait = msg.wait
        # Not a pipe here (unregistered, or never one): ready, so that recv tells why.
        ends = [(_watched(server, name), end) for name, end in msg.ends]
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
            watch.server.reply(watch.peer, watch.req_id, b"ok", Ready(ready).frames())
        else:
            watch.server.reply(watch.peer, watch.req_id, b"empty")

    def peer_gone(self, server: Server, peer: Peer) -> None:
        for watch in [w for w in self.watches if w.peer is peer]:
            self._drop(watch)


def _watched(server: Server, name: bytes) -> Optional[Watched]:
    service = server.service(name)
    return service if isinstance(service, Watched) else None


def ensure_service(hub: Server) -> None:
    """Register the hub's wait service (with its first pipe)."""
    hub.ensure(WAIT_SERVICE, WaitService)
