"""Read-only data handed to many processes: sent once per host, mapped by every reader. A
`Shared` handle pickles as a few bytes (evolution strategies give every worker the same
large noise table). The design: docs/contributing/transport.md, "Shared read-only data".
"""

from __future__ import annotations

import mmap
import os
import secrets
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar, Union

from .._process_state import here
from ..errors import TransportError
from ..transport import memfd
from ..transport.operations import handles, reply_of
from ..transport.remote import unpack_exception
from ..transport.serialization import Frame, dumps, loads
from ..transport.server import Peer, Server, Service
from . import _runtime
from ._clients import get_client
from ._served import collecting_handoffs

__all__ = ["Shared", "share", "share_if_large", "host_key", "SHARE_MIN_BYTES"]

T = TypeVar("T")

SERVICE = b"fiber-shared"
#: Buffers this large are sealed into a memfd of their own (as transport frames are).
SHARE_MIN_BYTES = 1 << 20


def host_key() -> str:
    """What processes that can pass each other memfds have in common: the kernel's boot
    id and the network namespace (abstract Unix sockets belong to one)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}/{os.stat('/proc/self/ns/net').st_ino}"
    except OSError:  # no /proc: a key no other process has (no sharing, never wrong)
        return f"unknown/{here.pid}/{_PROCESS_NONCE}"


_PROCESS_NONCE = secrets.token_hex(8)


class _Entry:
    """The frames of one shared object in a store: ready, or awaited (a mirror)."""

    def __init__(self, frames: Optional[Sequence[Frame]], original: object = None) -> None:
        self.frames = frames
        self.original = original  # the publisher's object itself
        self.waiters: List[Tuple[Peer, bytes]] = []
        #: host key: (process id, hub address) of the process holding a copy for its host
        self.holders: Dict[str, Tuple[bytes, str]] = {}
        self.transfers = {"same_host": 0, "other_host": 0}


def _seal(frames: Sequence[Frame]) -> List[Frame]:
    """The frames as a store keeps them: a copy, large buffers in sealed memfds (or, if
    the host refuses one, as bytes: sent on as a copy, not shared)."""
    kept: List[Any] = [bytes(frames[0])]
    for frame in frames[1:]:
        size = memoryview(frame).nbytes
        if memfd.AVAILABLE and size >= SHARE_MIN_BYTES:
            try:
                kept.append(memfd.sealed(frame))
                continue
            except OSError:
                pass
        kept.append(bytes(frame))
    return kept


def _private(frames: Sequence[Frame]) -> List[Frame]:
    """Frames for this process's own object: sealed mappings mapped again, copy on write
    (what a reader on the publisher's host gets), so that a write never reaches them."""
    out: List[Any] = [frames[0]]
    for frame in frames[1:]:
        if isinstance(frame, mmap.mmap):
            size = len(frame)
            frame = memfd.receive(memfd.to_memfd(frame, size), size)
        out.append(frame)
    return out


class SharedOps:
    """The shared-data protocol's operation (a request to a `SharedStore`)."""

    GET = b"get"  # `Get`: the data's frames (or the holder on this host)


class Get(NamedTuple):
    """``get``: the data's key, the asking process's host (`host_key`), and the address
    of its hub when it offers to hold the data for its host ("": it does not)."""

    key: bytes
    host: str
    offer: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Get:
        return cls(bytes(payload[0]), bytes(payload[1]).decode(), bytes(payload[2]).decode())

    def frames(self) -> List[Frame]:
        return [self.key, self.host.encode(), self.offer.encode()]


class Holder(NamedTuple):
    """The ``holder`` answer to a `Get` (else ``ok`` and the data's frames): the hub
    address of the process that holds the data for the asker's host."""

    address: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Holder:
        return cls(bytes(payload[0]).decode())

    def frames(self) -> List[Frame]:
        return [self.address.encode()]


class SharedStore(Service):
    """Serves the shared objects of one process: its own, and mirrors it holds for its
    host. Runs under the hub's lock, as every service."""

    protocol = "shared"

    def __init__(self, host: str) -> None:
        self.host = host
        self.entries: Dict[bytes, _Entry] = {}

    @handles(SharedOps.GET, Get)
    def get(self, server: Server, peer: Peer, req_id: bytes, msg: Get) -> None:
        key, host, offer = msg
        entry = self.entries.get(key)
        if entry is None:
            server.reply_error(peer, req_id, LookupError(
                "this shared data was released by the process that shared it (its "
                "fiber.shared handle was dropped, or its pool joined)"))
            return
        if entry.frames is None:  # a mirror still arriving: reply when it is here
            entry.waiters.append((peer, req_id))
            return
        if offer and host != self.host:
            holder = entry.holders.get(host)
            if holder is not None and holder[0] != peer.process_id:
                server.reply(peer, req_id, b"holder", Holder(holder[1]).frames())
                return
            entry.holders[host] = (peer.process_id, offer)
        entry.transfers["same_host" if host == self.host else "other_host"] += 1
        server.reply(peer, req_id, b"ok", entry.frames)

    def process_gone(self, server: Server, process_id: bytes) -> None:
        for entry in self.entries.values():
            for host, (pid, _) in list(entry.holders.items()):
                if pid == process_id:
                    del entry.holders[host]

    def fill(self, server: Server, key: bytes, frames: Sequence[Frame]) -> None:
        """A mirror's data arrived: keep it, and answer those who waited for it."""
        entry = self.entries.get(key)
        if entry is None:
            return
        entry.frames = frames
        waiters, entry.waiters = entry.waiters, []
        for peer, req_id in waiters:
            entry.transfers["same_host"] += 1
            server.reply(peer, req_id, b"ok", frames)

    def fail(self, server: Server, key: bytes, exc: BaseException) -> None:
        """A mirror's data cannot come: its waiters are told (``exc``), and fetch it
        themselves (`_fetch`)."""
        entry = self.entries.pop(key, None)
        for peer, req_id in entry.waiters if entry is not None else ():
            server.reply_error(peer, req_id, exc)


def _store(hub: Server) -> SharedStore:
    """The hub's store of shared objects (made on first use)."""
    return hub.ensure(SERVICE, SharedStore, lambda: SharedStore(host_key()))


class Shared:
    """A handle to an object shared with other processes, made by ``fiber.shared``.

    Pickled, it is a few bytes; unpickled in another process it is the object itself
    (read from pages every process of a host shares; writes stay private); unpickled in
    the process that shared it, the original object. The data is released when the
    handle is (or by `release`): keep it while processes may still receive it.
    """

    def __init__(self, address: str, key: bytes, host: str) -> None:
        self.address, self.key, self.host = address, key, host
        self._release: Optional[weakref.finalize[..., Shared]] = None

    def __reduce__(self) -> Tuple[Callable[[str, bytes, str], object], Tuple[str, bytes, str]]:
        return _resolve, (self.address, self.key, self.host)

    def release(self) -> None:
        """Forget the data now; processes that have it keep it."""
        if self._release is not None:
            self._release()

    def transfers(self) -> Dict[str, int]:
        """How often the publisher sent the data: to processes of its host (as memfds),
        and to others (each the first of its host, or one whose holder failed)."""
        hub = _runtime.hub()
        with hub.lock:
            entry = _store(hub).entries.get(self.key)
            return dict(entry.transfers) if entry is not None else {}

    def __repr__(self) -> str:
        return f"<fiber.Shared {self.key.hex()[:12]} of {self.address}>"


def share(obj: object) -> Shared:
    """Publish ``obj`` from this process: pickled once, large buffers copied once into
    sealed shared memory (see `Shared`).

    Raises:
        ValueError: ``obj`` holds fiber pipe ends or manager proxies: each is handed to
            one process (pass them as arguments).
        pickle.PicklingError, TypeError, AttributeError: ``obj`` cannot be pickled.
    """
    frames = _dumps_once(obj)
    if frames is None:
        raise ValueError("fiber.shared: the object holds fiber pipe ends or manager proxies, "
                         "each of which is handed to one process; pass those as arguments")
    return _publish(frames, obj)


def share_if_large(obj: T) -> Union[T, Shared]:
    """A `Shared` handle for ``obj`` when its pickle carries a buffer of at least
    ``SHARE_MIN_BYTES``; else ``obj`` itself (also when it cannot be pickled here, or holds
    what must be pickled once per receiver: pipe ends, manager proxies, objects of
    ``multiprocessing`` itself; those travel as a process's own arguments do)."""
    try:
        frames = _dumps_once(obj)
    except Exception:
        return obj
    if frames is None or b"multiprocessing" in bytes(frames[0]) or not any(
            memoryview(f).nbytes >= SHARE_MIN_BYTES for f in frames[1:]):
        return obj
    return _publish(frames, obj)


def _dumps_once(obj: object) -> Optional[List[Frame]]:
    """``obj``'s frames, or None when it holds objects handed to one receiver per pickle
    (their hand-offs are withdrawn at once: no process will take them)."""
    with collecting_handoffs() as handoffs:
        frames = dumps(obj)
    for release in handoffs:
        release()
    return None if handoffs else frames


def _publish(frames: Sequence[Frame], obj: object) -> Shared:
    hub = _runtime.hub()
    store = _store(hub)
    key = secrets.token_bytes(16)
    entry = _Entry(_seal(frames), obj)
    with hub.lock:
        store.entries[key] = entry
    handle = Shared(hub.address, key, store.host)
    # the handle is this module's class: its release is set here
    handle._release = weakref.finalize(handle, _forget, hub, store, key)  # noqa: SLF001
    return handle


def _forget(hub: Server, store: SharedStore, key: bytes) -> None:
    with hub.lock:
        store.entries.pop(key, None)


# -- the reader's side --------------------------------------------------------------------

# The frames this process built each object from, by key, and their lock: in
# ``here.transport`` (``shared_cache``, ``shared_cache_lock``).


def _resolve(address: str, key: bytes, host: str) -> object:
    """The object of a `Shared` handle, in the process that unpickles it."""
    hub = _runtime.hub_if_started()
    if hub is not None and hub.address == address:
        with hub.lock:
            entry = _store(hub).entries.get(key)
            if entry is not None and entry.frames is not None and entry.original is not None:
                return entry.original
    frames = _cached(key)
    if frames is None:
        frames = _fetch(address, key, host)
        state = here.transport
        with state.shared_cache_lock:
            state.shared_cache[key] = [f if not isinstance(f, mmap.mmap) else weakref.ref(f)
                                       for f in frames]
    return loads(frames)


def _cached(key: bytes) -> Optional[List[Frame]]:
    state = here.transport
    with state.shared_cache_lock:
        kept = state.shared_cache.get(key)
        if kept is None:
            return None
        frames: List[Frame] = []
        for f in kept:
            got = f() if isinstance(f, weakref.ref) else f
            if got is None:  # its buffer was released
                del state.shared_cache[key]
                return None
            frames.append(got)
        return frames


def _request(address: str, key: bytes, offer: str = "") -> Tuple[bytes, List[Frame]]:
    status, frames = get_client(address).request(
        SERVICE, SharedOps.GET, Get(key, host_key(), offer).frames())
    if status == b"err":
        raise unpack_exception(loads(frames))
    return status, frames


def _fetch(address: str, key: bytes, host: str) -> List[Frame]:
    """The frames of ``key``: from the publisher on its host, else through this host's
    holder, else from the publisher as this host's holder."""
    if host == host_key():
        return _request(address, key)[1]  # memfds over the Unix socket
    hub = _runtime.hub()
    store = _store(hub)
    with hub.lock:
        mine = key not in store.entries
        if mine:  # a mirror awaited: others of this host asking meanwhile wait for it
            store.entries[key] = _Entry(None)
    if not mine:  # another thread of this process holds it, or fetches it now
        try:
            return _private(_request(hub.address, key)[1])
        except Exception:  # that thread's fetch failed (`SharedStore.fail`): ask ourselves
            return _request(address, key)[1]
    try:
        status, frames = _request(address, key, hub.address)
        if status == b"holder":  # another process of this host holds it: no mirror here
            with hub.lock:
                store.fail(hub, key, LookupError("held by another process of this host"))
            try:
                return _request(reply_of(Holder, frames).address, key)[1]
            except (TransportError, LookupError):  # the holder failed: ask the publisher
                return _request(address, key)[1]
        sealed = _seal(frames)
    except BaseException as e:
        with hub.lock:  # (a no-op if the entry was failed already)
            store.fail(hub, key, e)
        raise
    with hub.lock:
        store.fill(hub, key, sealed)
    return _private(sealed)
