"""Managers: objects that live in a server process and are used through proxies. The API is
``multiprocessing.managers``', the wire fiber's; an ``AsyncManager`` serves each object from
a job of its own. The design: docs/contributing/transport.md, "Managers"."""

from __future__ import annotations

import atexit
import multiprocessing.managers as _mpm
import queue as _queue
import threading
import time
import weakref
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

from .. import queues, synchronize
from .._core import _served
from .._core._clients import get_client
from .._process_state import here
from ..config import get_config
from ..errors import ProcessError
from ..process._bound import BackendContext, process_class
from ..process._process import Process, mark_daemonic
from ..synchronize._primitives import ManagedLock
from ..transport import auth
from ..transport.client import ConnectionLost
from ..transport.serialization import Frame, loads
from ._async_calls import channel
from ._protocol import Create, ManagerOps
from ._proxies import (
    AcquirerProxy,
    ArrayProxy,
    AsyncAutoProxy,
    AsyncResultProxy,
    AutoProxy,
    BarrierProxy,
    BaseProxy,
    ConditionProxy,
    DictProxy,
    EventProxy,
    IteratorProxy,
    ListProxy,
    NamespaceProxy,
    PoolProxy,
    QueueProxy,
    ValueProxy,
    direct_object,
    lost_error,
    new_proxy,
    pending_proxy,
)
from ._server import MANAGER_SERVICE, Entry, Spec, manager_main, serve_manager

__all__ = ["BaseManager", "SyncManager", "AsyncManager", "Namespace", "Token"]

Namespace = _mpm.Namespace
#: What a proxy is made from, in the place of ``multiprocessing.managers.Token``: a named
#: tuple of the object's ``typeid``, its ``name`` and ``address`` on the server, the
#: methods it exposes (``exposed``), the fiber object its proxy calls directly
#: (``direct``, or None) and the proxy's type (``proxytype``).
Token = Spec


# -- managers ---------------------------------------------------------------------------

INITIAL, STARTED, SHUTDOWN = "initial", "started", "shutdown"


class _Root(_served.Handle):
    """The manager's own service, as a handle."""

    def __init__(self, address: str) -> None:
        self._name, self._address, self._finalizer = MANAGER_SERVICE, address, None

    def _lost(self, e: ConnectionLost) -> BaseException:
        return lost_error("the manager process is gone", e)

    def call(self, op: bytes, frames: Sequence[Frame] = ()) -> Tuple[bytes, List[Frame]]:
        """A request to the manager's service (see ManagerOps): ``(status, frames)``."""
        return self._request(op, frames)


#: What ``address=`` takes: a fiber address, or multiprocessing's ``(host, port)``.
Address = Union[str, Tuple[str, int]]


def _listen_address(address: Optional[Address], call: str) -> None:
    """Check that ``call`` (``start()``, ``get_server()``) may serve at ``address``.

    A manager's server listens where its job runs, on a port fiber chooses: a
    ``(host, 0)`` tuple asks for any port, which is what it gets; a fixed port cannot be
    honoured, and rather than serve elsewhere silently this says what to do instead.

    Raises:
        NotImplementedError: a ``(host, port)`` tuple with a port other than 0.
    """
    if isinstance(address, tuple) and (len(address) != 2 or address[1] != 0):
        raise NotImplementedError(
            f"{call}: a fiber manager cannot listen at {address!r}: its server listens "
            "where its job runs, on a port fiber chooses. Pass no address (or port 0), "
            "then give the started manager's .address (a fiber address, 'tcp://...') to "
            "BaseManager(address=...).connect() in the program's other processes")


class BaseManager:
    """A server process for shared objects, with the API of ``multiprocessing.managers``.

    ``address`` is a fiber address (``tcp://host:port...``, the ``address`` of a started
    manager) for `connect`; multiprocessing's ``(host, 0)`` is taken by `start` and
    `get_server` (any port); a tuple with a fixed port raises ``NotImplementedError``.
    Connections authenticate with the program's secret (``FIBER_SECRET``), so ``authkey``
    may only repeat it; ``serializer`` must be ``"pickle"``.
    """

    _registry: ClassVar[Dict[str, Entry]] = {}
    _separate_jobs: ClassVar[bool] = False
    _auto_proxy: ClassVar[type] = AutoProxy

    def __init__(self, address: Optional[Address] = None, authkey: Optional[bytes] = None,
                 serializer: str = "pickle", ctx: Optional[BackendContext] = None, *,
                 shutdown_timeout: float = 1.0) -> None:
        if authkey is not None and bytes(authkey) != auth.program_secret():
            raise ValueError("fiber connections authenticate with the program's secret "
                             "(FIBER_SECRET): a manager cannot use another authkey")
        if serializer != "pickle":
            raise ValueError(f"fiber managers use pickle, not {serializer!r}")
        if address is not None and not isinstance(address, (str, tuple)):
            raise TypeError(f"address must be a fiber address or a (host, port) tuple, "
                            f"not {type(address).__name__}")
        self._address: Optional[Address] = address
        self._ctx = ctx
        self._state = INITIAL
        self._process: Any = None
        self._server: Optional[_Server] = None
        self._shutdown_timeout = shutdown_timeout
        self._pid = here.pid

    @property
    def address(self) -> Optional[Address]:
        """The manager's fiber address (``tcp://host:port...``): None until started,
        unless given (then what was given, as multiprocessing's); another
        ``BaseManager(address).connect()`` of this program uses it."""
        return self._address

    def start(self, initializer: Optional[Callable[..., object]] = None,
              initargs: Sequence[object] = ()) -> None:
        """Start the manager's server as a job on the context's backend.

        ``initializer(*initargs)`` runs in the server process first. Returns once the
        server has reported its address (within the ``startup_timeout`` config key).

        Raises:
            fiber.errors.ProcessError: started already, shut down, or the server
                process did not start.
            TypeError: ``initializer`` is not callable.
            NotImplementedError: ``address`` is a ``(host, port)`` tuple with a port
                other than 0 (a fiber manager's server listens on a port fiber chooses).
        """
        if self._state != INITIAL:
            raise ProcessError("Already started server" if self._state == STARTED
                               else "Manager has shut down")
        _listen_address(self._address, "start()")
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        backend = None if self._ctx is None else self._ctx.backend
        report: queues.Queue[Any] = queues.Queue()
        proc = process_class(backend)(
            target=manager_main, name=f"{type(self).__name__}-server",
            args=(dict(self._registry), backend, report, initializer, tuple(initargs)))
        proc.start()
        # After a job has started, so after fiber.process's exit function: atexit runs
        # this hook first, which shuts the server down before that would end its job.
        _register_exit_hook()
        deadline = time.monotonic() + get_config().startup_timeout
        while True:
            try:
                address: str = report.get(timeout=0.2)
                break
            except _queue.Empty:
                if not proc.is_alive() or time.monotonic() > deadline:
                    proc.kill()
                    proc.join(10)
                    raise ProcessError(f"the manager process did not start (exit code "
                                       f"{proc.exitcode})") from None
        # Ended like a daemon when this process exits (multiprocessing shuts managers
        # down at exit too), though inside it is not one: it may start object jobs.
        mark_daemonic(proc)
        self._process, self._address = proc, address
        self._server = _Server(proc, address, self._shutdown_timeout)
        # As multiprocessing's: the server stops when this object is collected (the
        # proxies made here hold it) or when the program exits, whichever comes first.
        weakref.finalize(self, _stop_later, self._server).atexit = False  # type: ignore[misc, unused-ignore]
        self._state = STARTED

    def connect(self) -> None:
        """Use the running manager at ``address`` (started elsewhere in this program).

        Raises:
            ValueError: no ``address`` was given.
            NotImplementedError: ``address`` is a ``(host, port)`` tuple: a fiber manager
                is reached at its fiber address, not at a host and port.
            fiber.errors.TransportError: no manager answers at ``address``.
        """
        if self._address is None:
            raise ValueError("connect() needs the address of a running manager")
        if not isinstance(self._address, str):
            raise NotImplementedError(
                f"connect(): a fiber manager is not reached at {self._address!r}: pass "
                "the started manager's .address (a fiber address, 'tcp://...'); a "
                "manager serves the processes of its own program only")
        _Root(self._address).call(ManagerOps.PING)
        self._state = STARTED

    def get_server(self) -> _LocalServer:
        """A server for this manager's types in this process (``serve_forever``).

        Raises:
            NotImplementedError: ``address`` is a ``(host, port)`` tuple with a port other
                than 0 (the server is this process's, at its fiber address).
        """
        _listen_address(self._address, "get_server()")
        return _LocalServer(dict(self._registry), self._ctx)

    def _root(self) -> _Root:
        if self._state != STARTED or not isinstance(self._address, str):
            raise ProcessError("Manager has not been started" if self._state == INITIAL
                               else "Manager has shut down")
        return _Root(self._address)

    def _create(self, typeid: str, *args: object, **kwds: object) -> BaseProxy:
        _, frames = self._root().call(ManagerOps.CREATE, Create(typeid, args, kwds).frames())
        return new_proxy(loads(frames), manager=self)

    def _number_of_objects(self) -> int:
        """How many objects the manager serves (and object jobs it runs)."""
        return int(loads(self._root().call(ManagerOps.COUNT)[1]))

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait until the manager's server process has ended, or ``timeout`` seconds
        (None: no limit); returns at once if this manager did not start one."""
        if self._process is not None:
            self._process.join(timeout)

    def shutdown(self) -> None:
        """Stop the manager's server (if this manager started it) and wait for its job to
        end (asked to shut down; terminated if it has not ended ``shutdown_timeout`` + 5
        seconds later), so that ``active_children()`` no longer lists it; proxies then
        fail."""
        if self._state != STARTED:
            return
        self._state = SHUTDOWN
        if self._server is not None and self._pid == here.pid:
            self._server.stop()

    def __enter__(self) -> BaseManager:
        if self._state == INITIAL:
            self.start()
        if self._state != STARTED:
            raise ProcessError("Unable to start server")
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @classmethod
    def register(cls, typeid: str, callable: Optional[Callable[..., object]] = None,
                 proxytype: Optional[type] = None, exposed: Optional[Sequence[str]] = None,
                 method_to_typeid: Optional[Dict[str, str]] = None,
                 create_method: bool = True, *, separate_job: Optional[bool] = None
                 ) -> None:
        """Make ``typeid`` a type the manager can create (``manager.<typeid>(...)``).

        ``separate_job``: serve each object in its own job (default: the class's rule,
        False for BaseManager and SyncManager, True for AsyncManager).
        """
        if "_registry" not in cls.__dict__:
            cls._registry = dict(cls._registry)
        if proxytype is None:
            proxytype = cls._auto_proxy
        exposed = exposed or getattr(proxytype, "_exposed_", None)
        method_to_typeid = method_to_typeid or getattr(proxytype, "_method_to_typeid_", None)
        if method_to_typeid:
            for key, value in list(method_to_typeid.items()):
                assert isinstance(key, str), f"{key!r} is not a string"
                assert isinstance(value, str), f"{value!r} is not a string"
        cls._registry[typeid] = Entry(
            callable, tuple(exposed) if exposed is not None else None, method_to_typeid,
            proxytype, cls._separate_jobs if separate_job is None else separate_job)
        if create_method:
            def temp(self: BaseManager, /, *args: object, **kwds: object) -> BaseProxy:
                return self._create(typeid, *args, **kwds)
            temp.__name__ = typeid
            setattr(cls, typeid, temp)


class _LocalServer:
    """``manager.get_server()``: serve the manager's types from this process's hub."""

    def __init__(self, registry: Dict[str, Entry], ctx: Optional[BackendContext]) -> None:
        from .._core import _runtime

        self.registry = registry
        self.backend = None if ctx is None else ctx.backend
        self.address = _runtime.hub().address

    def serve_forever(self) -> None:
        """Serve until a client sends ``shutdown`` (``BaseManager(address).shutdown``...)."""
        serve_manager(self.registry, self.backend)


class _Server:
    """A started manager's server job, stopped once: by ``shutdown()``, when its manager
    is collected, or when the program exits (before fiber's own exit function would end
    it as a daemonic child: asked to shut down, it ends its object jobs first)."""

    def __init__(self, process: Process, address: Optional[str], timeout: float) -> None:
        self.process = process
        self.address = address
        self.timeout = timeout
        self.stopped = False
        #: Set once stopped: what a collected manager's finalizer waits for.
        self.done = threading.Event()
        self._lock = threading.Lock()
        with here.api.manager_servers_lock:
            here.api.manager_servers.add(self)

    def stop(self) -> None:
        """Ask the server to shut down and wait for its job; end it if it does not.

        Listed in ``here.api.manager_servers`` until stopped, so that the exit hook waits
        for a stop that the stopper thread has begun."""
        with self._lock:
            if self.stopped:
                return
            proc = self.process
            try:
                get_client(str(self.address), 5).request(MANAGER_SERVICE, ManagerOps.SHUTDOWN,
                                                         timeout=10)
            except Exception:
                pass
            proc.join(self.timeout + 5)
            if proc.is_alive():
                proc.terminate()
                proc.join(self.timeout)
                if proc.is_alive():
                    proc.kill()
                    proc.join(10)
            self.stopped = True
            self.done.set()
            with here.api.manager_servers_lock:
                here.api.manager_servers.discard(self)


def _register_exit_hook() -> None:
    """Once a process: the exit hook, and the thread that stops collected managers'
    servers (garbage collection may run anywhere, even where a request cannot be made)."""
    api = here.api
    if not api.manager_exit_hook:
        api.manager_exit_hook = True
        atexit.register(_shutdown_at_exit)
    if api.manager_stopper is None or not api.manager_stopper.is_alive():
        stopper = threading.Thread(target=_stop_loop, name="fiber-manager-stop", daemon=True)
        api.manager_stopper = stopper
        stopper.start()


def _stop_later(server: _Server) -> None:
    """A collected manager's finalizer: stop its server and wait for that, bounded.

    As multiprocessing's (``_finalize_manager``: join with a timeout, then terminate), so
    that the next ``active_children()`` no longer lists the server. The stop itself runs
    on the stopper thread, since garbage collection may run anywhere; on one of fiber's
    own threads (the hub, whose work the stop may need) the finalizer does not wait."""
    here.api.manager_stop_queue.put(server)  # SimpleQueue.put: safe in a finalizer
    if not threading.current_thread().name.startswith("fiber-"):
        server.done.wait(server.timeout + 1.0)


def _stop_loop() -> None:
    while True:
        server = here.api.manager_stop_queue.get()
        try:
            server.stop()
        except Exception:
            pass


def _shutdown_at_exit() -> None:
    with here.api.manager_servers_lock:
        servers = list(here.api.manager_servers)
    for server in servers:
        try:
            server.stop()
        except Exception:
            pass


def _managed_queue(maxsize: int = 0) -> queues.JoinableQueue[object]:
    return queues.JoinableQueue(maxsize)


class ManagedRLock(synchronize.RLock):
    """A ``SyncManager``'s ``RLock``: its errors are ``threading.RLock``'s, as the
    standard library's manager serves a ``threading.RLock`` (fiber's own raises
    ``AssertionError``, as ``multiprocessing.RLock``)."""

    def release(self) -> None:
        """Release the lock once (see `fiber.synchronize.Lock.release`).

        Raises:
            RuntimeError: the calling thread does not hold it (``threading.RLock``'s error).
        """
        try:
            super().release()
        except AssertionError:
            raise RuntimeError("cannot release un-acquired lock") from None


class ManagedCondition(synchronize.Condition):
    """A ``SyncManager``'s ``Condition``: waiting, notifying or releasing without its
    lock raises ``threading.Condition``'s ``RuntimeError``, as the standard library's
    manager serves a ``threading.Condition`` (fiber's own raises ``AssertionError``)."""

    def release(self) -> None:
        try:
            super().release()
        except AssertionError:
            raise RuntimeError("cannot release un-acquired lock") from None

    def wait(self, timeout: Optional[float] = None) -> bool:
        self._check_owned("wait on")
        return super().wait(timeout)

    def notify(self, n: int = 1) -> None:
        self._check_owned("notify on")
        super().notify(n)

    def notify_all(self) -> None:
        self._check_owned("notify on")
        super().notify_all()

    def _check_owned(self, doing: str) -> None:
        if not self._lock._is_mine():  # noqa: SLF001 - the stdlib's lock protocol
            raise RuntimeError(f"cannot {doing} un-acquired lock")


def _managed_condition(lock: Any = None) -> synchronize.Condition:
    if isinstance(lock, BaseProxy):
        lock = direct_object(lock)
    return ManagedCondition(ManagedRLock() if lock is None else lock)


def _managed_pool(*args: Any, **kwds: Any) -> Any:
    from ..pool import Pool

    return Pool(*args, **kwds)


_mp_value: Any = _mpm.Value  # type: ignore[attr-defined]  # not in typeshed
_mp_array: Any = _mpm.Array  # type: ignore[attr-defined]


class SyncManager(BaseManager):
    """A manager with the types of ``multiprocessing.managers.SyncManager``."""


for _typeid, _callable, _proxy in (
        ("Queue", _managed_queue, QueueProxy),
        ("JoinableQueue", _managed_queue, QueueProxy),
        ("Event", synchronize.Event, EventProxy),
        ("Lock", ManagedLock, AcquirerProxy),
        ("RLock", ManagedRLock, AcquirerProxy),
        ("Semaphore", synchronize.Semaphore, AcquirerProxy),
        ("BoundedSemaphore", synchronize.BoundedSemaphore, AcquirerProxy),
        ("Condition", _managed_condition, ConditionProxy),
        ("Barrier", synchronize.Barrier, BarrierProxy),
        ("Pool", _managed_pool, PoolProxy),
        ("list", list, ListProxy),
        ("dict", dict, DictProxy),
        ("Value", _mp_value, ValueProxy),
        ("Array", _mp_array, ArrayProxy),
        ("Namespace", _mpm.Namespace, NamespaceProxy)):
    SyncManager.register(_typeid, _callable, _proxy)
for _typeid in ("list", "dict", "Value", "Array", "Namespace"):  # never block: no thread hop
    registry = SyncManager._registry  # noqa: SLF001 - this module's class
    registry[_typeid] = registry[_typeid]._replace(inline=True)
SyncManager.register("Iterator", proxytype=IteratorProxy, create_method=False)

_CREATED_RAISES = """

Raises:
    fiber.errors.ProcessError: the manager was not started or has shut down.
    fiber.errors.TransportError: the manager process is gone or unreachable.
    Exception: what creating the object raised in the manager (bad arguments)."""

#: The docstrings of SyncManager's creation methods (made by ``register``).
_CREATED = MappingProxyType({
    "Queue": "A queue served by the manager's hub (a fiber ``JoinableQueue``, ``maxsize`` "
             "<= 0:\nunbounded); its `QueueProxy` calls it directly, one round trip.",
    "JoinableQueue": "A fiber ``JoinableQueue`` served by the manager's hub "
                     "(`QueueProxy`).",
    "Event": "A fiber ``Event`` served by the manager's hub (`EventProxy`).",
    "Lock": "A lock served by the manager's hub (`AcquirerProxy`), with the semantics of\n"
            "``threading.Lock``, as multiprocessing's: it stays held when the process\n"
            "that acquired it ends, and releasing it when free raises ``RuntimeError``.",
    "RLock": "A fiber ``RLock`` served by the manager's hub (`AcquirerProxy`); releasing\n"
             "it unacquired raises ``RuntimeError``, as ``threading.RLock``.",
    "Semaphore": "A fiber ``Semaphore(value)`` served by the manager's hub "
                 "(`AcquirerProxy`).",
    "BoundedSemaphore": "A fiber ``BoundedSemaphore(value)`` served by the manager's hub "
                        "(`AcquirerProxy`).",
    "Condition": "A fiber ``Condition`` over ``lock`` (a manager's lock proxy or a fiber "
                 "lock;\nNone: a new RLock), served by the manager's hub "
                 "(`ConditionProxy`);\nused without its lock it raises ``RuntimeError``, "
                 "as ``threading.Condition``.",
    "Barrier": "A fiber ``Barrier(parties, action, timeout)`` served by the manager's hub\n"
               "(`BarrierProxy`).",
    "Pool": "A `fiber.Pool` made in the manager process, whose workers are jobs it\n"
            "starts (`PoolProxy`): processes that did not create it can submit "
            "to it.",
    "list": "A ``list`` (from an optional iterable) kept by the manager (`ListProxy`).",
    "dict": "A ``dict`` (the arguments of ``dict()``) kept by the manager "
            "(`DictProxy`).",
    "Value": "An object with a ``value`` attribute kept by the manager "
             "(`ValueProxy`);\nas multiprocessing's, ``typecode`` is not checked.",
    "Array": "An ``array.array(typecode, sequence)`` kept by the manager "
             "(`ArrayProxy`).",
    "Namespace": "An object whose attributes are shared, kept by the manager\n"
                 "(`NamespaceProxy`); keyword arguments set its initial attributes.",
})
for _typeid, _doc in _CREATED.items():
    getattr(SyncManager, _typeid).__doc__ = _doc + _CREATED_RAISES
SyncManager.register("AsyncResult", proxytype=AsyncResultProxy, create_method=False)


class AsyncManager(BaseManager):
    """A manager whose proxies' calls return handles, each object in its own job.

    ``manager.Type(...)`` returns a proxy at once while the object's job starts (an error
    creating the object is raised by the first call that needs it); every method call
    returns a `CallHandle`. Objects of a type registered with
    ``separate_job=False`` live in the manager process and run one call at a time per
    calling process.
    """

    _separate_jobs = True
    _auto_proxy = AsyncAutoProxy

    def _create(self, typeid: str, *args: object, **kwds: object) -> BaseProxy:
        h = channel(self._root().hub_address).call(MANAGER_SERVICE, ManagerOps.CREATE,
                                                   Create(typeid, args, kwds).frames())
        return pending_proxy(self._registry[typeid].proxytype, typeid, h, manager=self)
