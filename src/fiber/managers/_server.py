"""The server side of managers: the manager process, and jobs that serve one object each.
Calls run on worker threads, one per client connection, so that the hub thread never runs
user code. The design: docs/contributing/transport.md, "Managers: the server"."""

from __future__ import annotations

import collections
import os
import queue
import signal
import threading
import time
from types import FrameType
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    List,
    NamedTuple,
    Optional,
    Set,
    Tuple,
)

from .._core import _runtime
from .._core._clients import get_client
from .._process_state import here
from ..backends import get_backend
from ..config import get_config
from ..errors import as_remote_error
from ..meta import resources_of
from ..process import end_with_parent
from ..process._bound import process_class
from ..process._process import set_resources
from ..transport.operations import handles
from ..transport.remote import pack_exception
from ..transport.serialization import Frame, dumps
from ..transport.server import Peer, Server, Service
from ._protocol import Call, Create, Created, ManagerOps, ObjectOps, ProxyHandoff

if TYPE_CHECKING:
    from .. import queues

__all__ = ["Entry", "Spec", "ObjectServer", "ManagerService", "manager_main",
           "object_job_main", "MANAGER_SERVICE", "NeedsThread", "pickling_on_hub"]

MANAGER_SERVICE = b"mgr"

#: The types of a dict's keys(), values() and items(), which a call answers with lists,
#: as multiprocessing's manager does (``d.keys() == ['a']``, ``d.keys()[0]``).
_DICT_VIEWS: Tuple[type, ...] = (type({}.keys()), type({}.values()), type({}.items()))


class Entry(NamedTuple):
    """A registered type, as the server needs it."""

    callable: Optional[Callable[..., Any]]
    exposed: Optional[Tuple[str, ...]]
    method_to_typeid: Optional[Dict[str, str]]
    proxytype: Any
    separate_job: bool
    #: Calls may run on the hub thread (builtin containers: they never block).
    inline: bool = False


class Spec(NamedTuple):
    """What a client needs to build a proxy for a new object (counted for its process)."""

    typeid: str
    name: bytes
    address: str
    exposed: Optional[Tuple[str, ...]]
    direct: Any  # a fiber object (Queue, Lock...) the proxy calls directly, or None
    proxytype: Any


def public_methods(obj: object) -> Tuple[str, ...]:
    """Names of the callable attributes of ``obj`` that do not start with '_'."""
    return tuple(name for name in dir(obj)
                 if name[0] != "_" and callable(getattr(obj, name, None)))


class WorkerThreads(Service):
    """One worker thread per client connection; a thread ends with its connection."""

    def __init__(self, lock: threading.RLock) -> None:
        self.queues: Dict[int, queue.SimpleQueue[Optional[Callable[[], None]]]] = {}
        self.busy: Dict[int, int] = collections.Counter()  # calls queued or running
        self.lock = lock

    def submit(self, peer: Peer, fn: Callable[[], None]) -> None:
        """Run ``fn`` on ``peer``'s worker thread, after its earlier calls (under the lock)."""
        key = peer.peer_id
        q = self.queues.get(key)
        if q is None:
            q = self.queues[key] = queue.SimpleQueue()
            threading.Thread(target=self._work, args=(q, key), name="fiber-manager-worker",
                             daemon=True).start()
        self.busy[key] += 1
        q.put(fn)

    def _work(self, q: queue.SimpleQueue[Optional[Callable[[], None]]], key: int) -> None:
        while True:
            fn = q.get()
            if fn is None:
                return
            try:
                fn()
            except BaseException:  # a reply that could not be sent: nothing to tell
                pass
            with self.lock:
                self.busy[key] -= 1
                if self.busy[key] <= 0:
                    del self.busy[key]

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Frame]) -> None:
        raise ValueError("not a service for requests")

    def peer_gone(self, server: Server, peer: Peer) -> None:
        q = self.queues.pop(peer.peer_id, None)
        if q is not None:
            q.put(None)


class NeedsThread(Exception):
    """Pickling a proxy on the hub thread (it would make a call): use a worker thread."""


def pickling_on_hub() -> bool:
    """Whether the hub thread is pickling a result (proxies raise NeedsThread then)."""
    return getattr(here.api.server_pickling, "on", False)


def _dumps_on_hub(obj: object) -> List[Frame]:
    pickling = here.api.server_pickling
    pickling.on = True
    try:
        return dumps(obj)
    finally:
        pickling.on = False


def _reply(server: Server, peer: Peer, req_id: bytes, fn: Callable[[], Tuple[bytes, Any]]
           ) -> None:
    """Run ``fn`` (in a worker thread) and send what it returns, or its exception."""
    try:
        status, frames = fn()
    except BaseException as e:  # (asyncio.CancelledError, SystemExit too: the caller waits)
        status, frames = b"err", dumps(pack_exception(e))
    with server.lock:
        server.reply(peer, req_id, status, frames)


class ObjectServer:
    """The managed objects served by this process's hub (a manager or an object job)."""

    def __init__(self, registry: Dict[str, Entry]) -> None:
        self.registry = registry
        self.hub = _runtime.hub()
        self.workers = WorkerThreads(self.hub.lock)
        self.hub.register(b"mgr-workers", self.workers)
        self.objects: Dict[bytes, ObjectService] = {}
        self.changed = threading.Condition(self.hub.lock)

    def create(self, typeid: str, args: Tuple[object, ...], kwds: Dict[str, object],
               holder: bytes) -> Spec:
        entry = self.registry[typeid]
        if entry.callable is None:
            if len(args) != 1 or kwds:
                raise TypeError(f"{typeid!r} has no callable: give the object itself")
            obj = args[0]
        else:
            try:
                obj = entry.callable(*args, **kwds)
            except Exception as e:  # reported as multiprocessing's manager reports it
                raise as_remote_error(e) from None
        return self.serve(obj, typeid, holder)

    def serve(self, obj: object, typeid: str, holder: bytes) -> Spec:
        """Serve ``obj`` as a new managed object, counted once for process ``holder``."""
        from .._core._served import Handle

        entry = self.registry[typeid]
        exposed = entry.exposed
        if exposed is None:
            exposed = getattr(entry.proxytype, "_exposed_", None) or public_methods(obj)
        import secrets

        name = b"o" + secrets.token_hex(8).encode()
        svc = ObjectService(self, name, obj, typeid, tuple(exposed),
                            entry.method_to_typeid or {}, entry.inline)
        svc.holders[holder] += 1
        with self.hub.lock:
            self.objects[name] = svc
            self.hub.register(name, svc)
        direct = obj if isinstance(obj, Handle) else None
        return Spec(typeid, name, self.hub.address, tuple(exposed), direct, entry.proxytype)

    def drop(self, name: bytes) -> None:
        """Forget an object (under the hub lock)."""
        self.hub.unregister(name)
        self.objects.pop(name, None)
        self.changed.notify_all()

    def close(self) -> None:
        """Stop the worker threads once their calls are done; forget every object."""
        with self.hub.lock:
            for name in list(self.objects):
                self.drop(name)
            self.hub.unregister(b"mgr-workers")
            for q in self.workers.queues.values():
                q.put(None)
            self.workers.queues.clear()

    def wait_until_empty(self, stop: Optional[threading.Event] = None) -> None:
        with self.changed:
            while self.objects and not (stop is not None and stop.is_set()):
                self.changed.wait(0.5)


class ObjectService(Service):
    """One managed object: calls (on worker threads), and its proxies' counts."""

    protocol = "managed-object"
    #: A call runs to its end and is answered even if its connection ended meanwhile:
    #: asked again after a reset, it is answered, not run twice.
    answers_again = True

    def __init__(self, owner: ObjectServer, name: bytes, obj: object, typeid: str,
                 exposed: Tuple[str, ...], method_to_typeid: Dict[str, str],
                 inline: bool = False) -> None:
        self.owner = owner
        self.inline = inline
        self.name = name
        self.obj = obj
        self.typeid = typeid
        self.exposed = frozenset(exposed)
        self.method_to_typeid = method_to_typeid
        self.holders: Dict[bytes, int] = collections.Counter()
        self.handoffs: Set[bytes] = set()
        self.dropped = False

    @handles(ObjectOps.CALL, Call)
    def call(self, server: Server, peer: Peer, req_id: bytes, msg: Call) -> None:
        """On a worker thread (inline ones on the hub)."""
        if (self.inline and peer.peer_id not in self.owner.workers.busy
                and not msg.holds_proxies()):
            self._call_on_hub(server, peer, req_id, msg)
            return
        self.owner.workers.submit(peer, lambda: _reply(
            server, peer, req_id, lambda: self._call(peer, msg)))

    @handles(ObjectOps.ATTACH, ProxyHandoff)
    def attach(self, server: Server, peer: Peer, req_id: bytes, msg: ProxyHandoff) -> None:
        """A process unpickled a proxy handed off to it; it holds one now."""
        self.handoffs.discard(msg.token)
        self.holders[peer.process_id] += 1
        server.reply(peer, req_id, b"ok")

    @handles(ObjectOps.HANDOFF, ProxyHandoff)
    def handoff(self, server: Server, peer: Peer, req_id: bytes, msg: ProxyHandoff) -> None:
        """A proxy is being pickled; the object is kept until it is attached."""
        self.handoffs.add(msg.token)
        server.reply(peer, req_id, b"ok")

    @handles(ObjectOps.RELEASE, ProxyHandoff)
    def release(self, server: Server, peer: Peer, req_id: bytes, msg: ProxyHandoff) -> None:
        """A handoff that nobody will attach."""
        self.handoffs.discard(msg.token)
        self._maybe_drop()

    @handles(ObjectOps.DETACH)
    def detach(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """A proxy of the sender's process was dropped."""
        pid = peer.process_id
        self.holders[pid] -= 1
        if self.holders[pid] <= 0:
            del self.holders[pid]
        self._maybe_drop()

    @handles(ObjectOps.GETVALUE)
    def getvalue(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        self.owner.workers.submit(peer, lambda: _reply(
            server, peer, req_id, lambda: (b"ok", dumps(self.obj))))

    @handles(ObjectOps.REPR)
    def repr_of(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        self.owner.workers.submit(peer, lambda: _reply(
            server, peer, req_id, lambda: (b"ok", dumps(repr(self.obj)))))

    def _call(self, peer: Peer, msg: Call, pickle: bool = True) -> Tuple[bytes, Any]:
        method, args, kwds = msg.unpickled()
        if method not in self.exposed:  # a RemoteError with multiprocessing's manager
            raise as_remote_error(AttributeError(
                f"method {method!r} of {type(self.obj)!r} object is not in "
                f"exposed={tuple(sorted(self.exposed))!r}"))
        result = getattr(self.obj, method)(*args, **kwds)
        if type(result) in _DICT_VIEWS:  # multiprocessing sends them as lists
            result = list(result)
        typeid = self.method_to_typeid.get(method)
        if typeid:
            return b"proxy", dumps(self.owner.serve(result, typeid, peer.process_id))
        return b"ok", dumps(result) if pickle else result

    def _call_on_hub(self, server: Server, peer: Peer, req_id: bytes, msg: Call) -> None:
        """A call of a container that cannot block, without a thread hop. Arguments that
        hold proxies went to a worker thread; a result that holds one goes there to be
        pickled (pickling a proxy is a call, which the hub thread must not wait for)."""
        try:
            status, result = self._call(peer, msg, pickle=False)
        except BaseException as e:  # as _reply: a sort key's SystemExit is the caller's
            server.reply_error(peer, req_id, e)
            return
        if status != b"ok":
            server.reply(peer, req_id, status, result)
            return
        try:
            frames = _dumps_on_hub(result)
        except NeedsThread:
            self.owner.workers.submit(peer, lambda: _reply(
                server, peer, req_id, lambda: (b"ok", dumps(result))))
        except BaseException as e:
            server.reply_error(peer, req_id, e)
        else:
            server.reply(peer, req_id, b"ok", frames)

    def _maybe_drop(self) -> None:
        if not self.holders and not self.handoffs and not self.dropped:
            self.dropped = True
            self.owner.drop(self.name)
            obj, self.obj = self.obj, None
            if not self.inline:
                release_off_hub(obj)

    def process_gone(self, server: Server, process_id: bytes) -> None:
        if self.holders.pop(process_id, None) is not None:
            self._maybe_drop()


def release_off_hub(obj: object) -> None:
    """Let go of a managed object on the releaser thread, not on the hub thread (which
    is where an object is dropped): what its last reference runs may block, and the hub
    must keep serving meanwhile (a dropped ``Pool`` terminates and waits for its workers,
    which need the hub to say goodbye)."""
    api = here.api
    with api.server_releaser_lock:
        if api.server_releaser is None or not api.server_releaser.is_alive():
            thread = threading.Thread(target=_release_loop, name="fiber-manager-release",
                                      daemon=True)
            thread.start()
            api.server_releaser = thread
    api.server_released.put(obj)


def _release_loop() -> None:
    while True:
        obj = here.api.server_released.get()
        try:
            del obj  # the object's finalizers run here
        except BaseException:  # noqa: S110 - a finalizer's error must not end the thread
            pass


class ManagerService(Service):
    """The manager's own service: create objects, count them, shut down."""

    protocol = "manager"

    def __init__(self, objects: ObjectServer, backend: Optional[str]) -> None:
        self.objects = objects
        self.backend = backend
        self.stopped = threading.Event()
        self.jobs: Dict[bytes, Any] = {}  # creation id -> Process serving one object
        #: creation ids whose start() has not returned yet: live, whatever is_alive says
        self.starting: Set[bytes] = set()
        self.pending: Dict[bytes, Tuple[Peer, bytes, str]] = {}
        self._lock = threading.Lock()

    @handles(ManagerOps.CREATE, Create)
    def create(self, server: Server, peer: Peer, req_id: bytes, msg: Create) -> None:
        """Answered with the new object's Spec."""
        typeid, args, kwds = msg
        if typeid not in self.objects.registry:  # a RemoteError with multiprocessing's
            raise as_remote_error(KeyError(f"no type {typeid!r} registered with this manager"))
        holder = peer.process_id
        if self.objects.registry[typeid].separate_job:
            self.objects.workers.submit(peer, lambda: self._start_job(
                server, peer, req_id, typeid, args, kwds, holder))
        else:
            self.objects.workers.submit(peer, lambda: _reply(server, peer, req_id, lambda: (
                b"ok", dumps(self.objects.create(typeid, args, kwds, holder)))))

    @handles(ManagerOps.CREATED, Created)
    def created(self, server: Server, peer: Peer, req_id: bytes, msg: Created) -> None:
        """An object job reports its object (or its error), the answer to the creation
        waiting for it."""
        entry = self.pending.pop(msg.cid, None)
        if entry is not None:
            server.reply(entry[0], entry[1], msg.status, msg.reply)
        server.reply(peer, req_id, b"ok")

    @handles(ManagerOps.PING)
    def ping(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """Answered with the registered type ids."""
        server.reply_value(peer, req_id, sorted(self.objects.registry))

    @handles(ManagerOps.COUNT)
    def count(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """Answered with the number of live objects (object jobs included)."""
        with self._lock:
            jobs = sum(1 for cid, p in self.jobs.items()
                       if cid in self.starting or p.is_alive())
        server.reply_value(peer, req_id, len(self.objects.objects) + jobs)

    @handles(ManagerOps.SHUTDOWN)
    def shutdown(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        server.reply(peer, req_id, b"ok")
        self.stopped.set()

    def _start_job(self, server: Server, peer: Peer, req_id: bytes, typeid: str,
                   args: Tuple[object, ...], kwds: Dict[str, object], holder: bytes) -> None:
        """In a worker thread: start the job that will serve one object; it answers."""
        import secrets

        entry = self.objects.registry[typeid]
        cid = secrets.token_bytes(8)
        try:
            proc = process_class(self.backend)(
                target=object_job_main, name=f"{typeid}-object",
                args=(self.objects.registry, typeid, args, kwds, holder,
                      self.objects.hub.address, cid))
            set_resources(proc, resources_of(entry.callable))  # the callable's @fiber.meta
            end_with_parent(proc)  # it serves this manager's object only
        except Exception as e:  # (its caller waits for an answer)
            with server.lock:
                server.reply_error(peer, req_id, e)
            return
        with server.lock:
            self.pending[cid] = (peer, req_id, typeid)
        # Known before it starts, and counted live until start() has returned: the job
        # may serve its object (and be asked for) before start() returns.
        with self._lock:
            self.jobs[cid] = proc
            self.starting.add(cid)
        try:
            proc.start()
        except Exception as e:
            with self._lock:
                self.jobs.pop(cid, None)
            with server.lock:
                if self.pending.pop(cid, None) is not None:
                    server.reply_error(peer, req_id, e)
            return
        finally:
            with self._lock:
                self.starting.discard(cid)

    def reap(self, server: Server) -> None:
        """Answer creations whose job ended before reporting; forget ended jobs."""
        with self._lock:
            ended = [(cid, p) for cid, p in self.jobs.items()
                     if cid not in self.starting and not p.is_alive()]
            for cid, _ in ended:
                del self.jobs[cid]
        for cid, proc in ended:
            with server.lock:
                entry = self.pending.pop(cid, None)
                if entry is not None:
                    server.reply_error(entry[0], entry[1], RuntimeError(
                        f"the job serving a new {entry[2]!r} ended (exit code "
                        f"{proc.exitcode}) before the object was created"))

    def stop_jobs(self) -> None:
        """End the object jobs. A start in progress is let return first (up to 10 s): its
        job may already serve its object, even be done with it, before ``start()`` has
        returned in the worker thread that called it, and only then can it be joined."""
        deadline = time.monotonic() + 10
        while True:
            with self._lock:
                if not self.starting or time.monotonic() > deadline:
                    procs = [p for cid, p in self.jobs.items() if cid not in self.starting]
                    self.jobs.clear()
                    break
            time.sleep(0.01)
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)


def serve_manager(registry: Dict[str, Entry], backend: Optional[str],
                  ready: Optional[Callable[[str], None]] = None,
                  stop_on_sigterm: bool = False) -> bool:
    """Serve a manager on this process's hub until a client asks it to shut down.

    ``stop_on_sigterm`` (the main thread of a manager's own job): SIGTERM stops it the
    same way, so that its object jobs end with it instead of finding their parent gone.
    Returns whether SIGTERM stopped it.
    """
    objects = ObjectServer(registry)
    service = ManagerService(objects, backend)
    hub = objects.hub
    hub.register(MANAGER_SERVICE, service)
    terminated = threading.Event()
    if stop_on_sigterm and threading.current_thread() is threading.main_thread():
        def on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
            terminated.set()
            service.stopped.set()
        signal.signal(signal.SIGTERM, on_sigterm)
    try:
        if any(entry.separate_job for entry in registry.values()):
            # before it reports ready: the first object's job then starts as fast as
            # the next (the local backend's fork server takes ~0.5 s to start)
            get_backend(backend or get_config().backend).prepare()
        if ready is not None:
            ready(hub.address)
        while not service.stopped.wait(0.2):
            service.reap(hub)
    finally:
        service.stop_jobs()
        hub.unregister(MANAGER_SERVICE)
        objects.close()
    return terminated.is_set()


def manager_main(registry: Dict[str, Entry], backend: Optional[str],
                 report: queues.Queue[str], initializer: Optional[Callable[..., object]],
                 initargs: Tuple[object, ...]) -> None:
    """The target of the manager's process."""
    if initializer is not None:
        initializer(*initargs)
    if serve_manager(registry, backend, ready=report.put, stop_on_sigterm=True):
        # terminated: end as SIGTERM would have (exit code -15), now that the object
        # jobs have ended
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(here.pid, signal.SIGTERM)


def object_job_main(registry: Dict[str, Entry], typeid: str, args: Tuple[object, ...],
                    kwds: Dict[str, object], holder: bytes, manager: str,
                    cid: bytes) -> None:
    """The target of a job that serves one object; it ends when the object is dropped."""
    objects = ObjectServer(registry)
    try:
        status, frames = b"ok", dumps(objects.create(typeid, args, kwds, holder))
    except Exception as e:
        status, frames = b"err", dumps(pack_exception(e))
    get_client(manager).request(MANAGER_SERVICE, ManagerOps.CREATED,
                                Created(cid, status, frames).frames())
    if status == b"ok":
        objects.wait_until_empty()
