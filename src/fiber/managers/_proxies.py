"""Proxies: the client side of managed objects (see `fiber.managers`).

    proxy._callmethod(m, args) ── [o…, call, (m, args, kwds)] ──▶ ObjectService (manager)
                               ◀── ok + result | proxy + Spec | err + exception ──
    pickle.dumps(proxy) ── [o…, handoff, token] ──▶ the object stays while the copy travels
    pickle.loads(...)   ── [o…, attach, token] ───▶ counted for the unpickling process
    proxy garbage-collected ─▶ detach thread ── [o…, detach] ──▶ count - 1
    DirectProxy (Queue, Lock, ...): calls go to the fiber object served by the manager's
        hub, directly: ``q.get(timeout=1)`` is one round trip, decided by that hub
    AsyncProxy: ``_callmethod`` writes the request and returns a CallHandle at once

A proxy is a `Handle` (the object's service name and its server's
address). Proxies returned by an ``AsyncManager`` may be *pending*: the object's job is
still starting; the first use waits for it (``_resolve``).
"""

from __future__ import annotations

import functools
import multiprocessing.managers as _mpm
import secrets
import threading
import weakref
from typing import Any, Callable, ClassVar, Dict, Iterable, List, Optional, Sequence, Tuple, Type

from .._core import _served
from .._core._clients import get_client
from .._process_state import here
from ..transport.client import ConnectionLost
from ..transport.serialization import Frame, loads
from . import _server as _manager_server
from ._async_calls import CallHandle, channel
from ._protocol import Call, ObjectOps, ProxyHandoff
from ._server import Spec

__all__ = ["BaseProxy", "AsyncProxy", "AutoProxy", "AsyncAutoProxy", "MakeProxyType",
           "DirectProxy", "DictProxy", "ListProxy", "ValueProxy", "ArrayProxy",
           "NamespaceProxy", "IteratorProxy", "AcquirerProxy", "ConditionProxy",
           "EventProxy", "BarrierProxy", "QueueProxy", "PoolProxy", "BasePoolProxy",
           "AsyncResultProxy", "BaseListProxy"]


class BaseProxy(_served.Handle):
    """The client side of a managed object; ``_callmethod`` calls it in its server."""

    _exposed_: ClassVar[Optional[Tuple[str, ...]]] = None
    _typeid = ""
    _exposed: Tuple[str, ...] = ()
    _direct: Any = None
    _pending: Optional[CallHandle] = None
    _cell: Optional[List[Any]] = None
    #: The manager that made this proxy in this process (None in others, once unpickled):
    #: as multiprocessing's, it lives while its proxies do, since collecting it stops its
    #: server.
    _manager: Any = None
    #: A managed object's requests are served once and always answered
    #: (``ObjectService.answers_again``): a call whose reply a reset cut off is asked
    #: again and gets its answer, not a second run.
    _asks_again = True

    def _init(self, spec: Spec) -> None:
        """Become the proxy of ``spec``'s object, counted once for this process."""
        object.__setattr__(self, "_typeid", spec.typeid)
        object.__setattr__(self, "_name", spec.name)
        object.__setattr__(self, "_address", spec.address)
        object.__setattr__(self, "_exposed", tuple(spec.exposed or ()))
        object.__setattr__(self, "_direct", spec.direct)
        object.__setattr__(self, "_finalizer", None)
        object.__setattr__(self, "_pending", None)
        cell = self._cell
        if cell is None:
            cell = [None, None, None]
            object.__setattr__(self, "_cell", cell)
            _watch(self, cell)
        cell[0], cell[1], cell[2] = spec.address, spec.name, None

    def _resolve(self) -> None:
        if self._pending is not None:
            spec = self._pending.get()
            self._init(spec)


    def _callmethod(self, methodname: str, args: Sequence[object] = (),
                    kwds: Optional[Dict[str, object]] = None) -> Any:
        """Call ``methodname`` on the referent and return its result (or a proxy)."""
        self._resolve()
        if self._direct is not None:
            return getattr(self._direct, methodname)(*args, **(kwds or {}))
        status, frames = self._request(ObjectOps.CALL,
                                       Call.of(methodname, args, kwds).frames())
        return _decode(status, frames, self._manager)

    def _getvalue(self) -> Any:
        """A copy of the referent."""
        self._resolve()
        return loads(self._request(ObjectOps.GETVALUE)[1])

    def __reduce__(self) -> Tuple[Callable[..., BaseProxy], Tuple[type, Spec, bytes]]:
        if _manager_server.pickling_on_hub():
            raise _manager_server.NeedsThread
        self._resolve()
        token = secrets.token_bytes(8)
        self._request(ObjectOps.HANDOFF, ProxyHandoff(token).frames())
        address, name = self._address, self._name
        _served.add_handoff(lambda: _release(address, name, token))
        spec = Spec(self._typeid, name, address, self._exposed, self._direct, None)
        return (_rebuild_proxy, (type(self), spec, token))

    def _lost(self, e: ConnectionLost) -> BaseException:
        return lost_error(f"the manager process serving this {self._typeid or 'object'} is gone",
                     e)

    def __repr__(self) -> str:
        # as multiprocessing's: <AcquirerProxy object, typeid 'Lock' at 0x7f...>
        return f"<{type(self).__name__} object, typeid {self._typeid!r} at {id(self):#x}>"

    def __str__(self) -> str:
        self._resolve()
        if self._direct is not None:
            return repr(self._direct)
        try:
            return str(loads(self._request(ObjectOps.REPR)[1]))
        except Exception:
            return repr(self)


def lost_error(what: str, e: ConnectionLost) -> ConnectionLost:
    """``ConnectionLost`` saying which object's server is gone (and why, and where)."""
    err = ConnectionLost(f"{what}: {e}")
    err.address = e.address
    return err


def _decode(status: bytes, frames: Sequence[Frame], manager: object = None) -> object:
    """A call's result; a new proxy (``method_to_typeid``) keeps ``manager`` alive."""
    if status == b"proxy":
        return new_proxy(loads(frames), manager)
    return loads(frames)


# -- what the managers need of their proxies (this module's class: noqa SLF001 below) ---


def new_proxy(spec: Spec, manager: object = None) -> BaseProxy:
    """The proxy of the object ``spec`` describes (what a manager's creation returns);
    it keeps ``manager`` (the creating one) alive."""
    proxy: BaseProxy = spec.proxytype.__new__(spec.proxytype)
    proxy._init(spec)  # noqa: SLF001
    object.__setattr__(proxy, "_manager", manager)
    return proxy


def pending_proxy(proxytype: Type[BaseProxy], typeid: str, creation: CallHandle,
                  manager: object = None) -> BaseProxy:
    """A proxy of an object still being created (``creation`` gives its spec): an
    AsyncManager's, returned at once while the object's job starts; it keeps ``manager``
    alive."""
    proxy: BaseProxy = proxytype.__new__(proxytype)
    cell: List[Any] = [None, None, creation]
    object.__setattr__(proxy, "_cell", cell)
    object.__setattr__(proxy, "_pending", creation)
    object.__setattr__(proxy, "_typeid", typeid)
    object.__setattr__(proxy, "_finalizer", None)
    object.__setattr__(proxy, "_manager", manager)
    _watch(proxy, cell)
    return proxy


def direct_object(proxy: BaseProxy) -> object:
    """The fiber object a proxy of a direct type calls itself (a managed Lock's Lock)."""
    proxy._resolve()  # noqa: SLF001
    return proxy._direct  # noqa: SLF001


def _rebuild_proxy(cls: Type[BaseProxy], spec: Spec, token: bytes) -> BaseProxy:
    # a proxy of this module's class, unpickled: its private state is set here
    proxy: BaseProxy = cls.__new__(cls)
    object.__setattr__(proxy, "_name", spec.name)
    object.__setattr__(proxy, "_address", spec.address)
    proxy._request(ObjectOps.ATTACH, ProxyHandoff(token).frames())  # noqa: SLF001
    proxy._init(spec)  # noqa: SLF001
    return proxy


def _release(address: str, name: bytes, token: bytes) -> None:
    try:
        get_client(address, 5).send(name, ObjectOps.RELEASE, ProxyHandoff(token).frames())
    except Exception:
        pass


# -- detaching garbage-collected proxies (from a thread: GC may run anywhere) -----------

def _watch(proxy: BaseProxy, cell: List[object]) -> None:
    """Send ``detach`` for ``proxy``'s object once ``proxy`` is garbage-collected."""
    api = here.api
    fin = weakref.finalize(proxy, api.proxy_detach_queue.put, cell)
    fin.atexit = False  # type: ignore[misc, unused-ignore]
    with api.proxy_detach_lock:
        if api.proxy_detach_thread is None or not api.proxy_detach_thread.is_alive():
            thread = threading.Thread(target=_detach_loop, daemon=True,
                                      name="fiber-manager-detach")
            api.proxy_detach_thread = thread
            thread.start()


def _detach_loop() -> None:
    while True:
        address, name, pending = here.api.proxy_detach_queue.get()
        try:
            if name is None and pending is not None:
                spec = pending.get(timeout=600)
                address, name = spec.address, spec.name
            get_client(address, 5).send(name, ObjectOps.DETACH)
        except Exception:
            pass  # its server is gone: nothing left to free


class AsyncProxy(BaseProxy):
    """A proxy whose method calls return a `CallHandle` at once."""

    def _callmethod(self, methodname: str, args: Sequence[object] = (),
                    kwds: Optional[Dict[str, object]] = None) -> CallHandle:
        self._resolve()
        # m.Env().step(a).get(): the proxy lives until the reply is read
        return channel(self._address).call(self._name, ObjectOps.CALL,
                                           Call.of(methodname, args, kwds).frames(),
                                           decode=functools.partial(_decode,
                                                                    manager=self._manager),
                                           owner=self, again=True)


class AutoProxy(BaseProxy):
    """A proxy for any type: every exposed method of the referent (the public ones by
    default; a private one when ``register(exposed=...)`` names it) is an attribute that
    calls it."""

    def __getattr__(self, name: str) -> Any:
        if name[:1] == "_" and (name[:2] == "__" or name not in self.__dict__.get("_exposed", ())):
            raise AttributeError(name)
        self._resolve()
        if name not in self._exposed:
            raise AttributeError(f"{self._typeid!r} proxy has no exposed method {name!r}")
        call = self._callmethod

        def method(*args: Any, **kwds: Any) -> Any:
            return call(name, args, kwds)
        method.__name__ = name
        return method

    def __dir__(self) -> List[str]:
        self._resolve()
        return sorted(set(super().__dir__()) | set(self._exposed))


class AsyncAutoProxy(AsyncProxy, AutoProxy):
    """An `AutoProxy` whose calls return handles (the AsyncManager default)."""


def _mp_exposed(name: str) -> Tuple[str, ...]:
    """The methods multiprocessing's proxy class ``name`` exposes (the same here)."""
    return tuple(getattr(_mpm, name)._exposed_)


#: The docstring of each method of a class made by `MakeProxyType`.
_METHOD_DOC = """Call ``{meth}`` on the referent in the manager's process; return its result.

Raises:
    Exception: what the referent's method raised, with its remote traceback.
    fiber.errors.TransportError: the manager process is gone or unreachable.
"""


def MakeProxyType(name: str, exposed: Sequence[str],  # noqa: N802
                  base: type = BaseProxy) -> type:
    """A proxy class with one method per name of ``exposed`` (as multiprocessing's)."""
    exposed = tuple(exposed)
    key = (name, exposed, base)
    made = here.api.proxy_types
    if key in made:
        return made[key]
    namespace: Dict[str, Any] = {}
    for meth in exposed:
        exec(f"def {meth}(self, /, *args, **kwds):\n"
             f"    {_METHOD_DOC.format(meth=meth)!r}\n"
             f"    return self._callmethod({meth!r}, args, kwds)", namespace)
    cls = type(name, (base,), {k: v for k, v in namespace.items() if k in exposed})
    cls._exposed_ = exposed  # type: ignore[attr-defined]
    cls.__module__ = __name__
    made[key] = cls
    return cls


class IteratorProxy(BaseProxy):
    """The proxy of an iterator or generator in the manager (what ``PoolProxy.imap`` returns).

    Iterating it asks the manager for one item at a time.
    """
    _exposed_ = ("__next__", "send", "throw", "close")

    def __iter__(self) -> IteratorProxy:
        return self

    def __next__(self, *args: Any) -> Any:
        return self._callmethod("__next__", args)

    def send(self, *args: Any) -> Any:
        """Send a value into the managed generator (``generator.send``); its next item.

        Raises:
            StopIteration: the generator is exhausted.
            fiber.errors.TransportError: the manager process is gone or unreachable.
        """
        return self._callmethod("send", args)

    def throw(self, *args: Any) -> Any:
        """Raise an exception inside the managed generator (``generator.throw``); its next item.

        Raises:
            Exception: what the generator raises (the thrown exception if it does not catch it).
            fiber.errors.TransportError: the manager process is gone or unreachable.
        """
        return self._callmethod("throw", args)

    def close(self, *args: Any) -> Any:
        """Close the managed generator (``generator.close``): no more items.

        Raises:
            fiber.errors.TransportError: the manager process is gone or unreachable.
        """
        return self._callmethod("close", args)


class NamespaceProxy(BaseProxy):
    """The proxy of a manager's ``Namespace``: ``ns.x``, ``ns.x = 1``, ``del ns.x``.

    Each access is one round trip to the manager; names starting with ``_`` are the
    proxy's own attributes, not the namespace's.
    """
    _exposed_ = ("__getattribute__", "__setattr__", "__delattr__")

    def __getattr__(self, key: str) -> Any:
        if key[0] == "_":
            raise AttributeError(key)
        return self._callmethod("__getattribute__", (key,))

    def __setattr__(self, key: str, value: object) -> None:
        if key[0] == "_":
            object.__setattr__(self, key, value)
        else:
            self._callmethod("__setattr__", (key, value))

    def __delattr__(self, key: str) -> None:
        if key[0] == "_":
            object.__delattr__(self, key)
        else:
            self._callmethod("__delattr__", (key,))


class ValueProxy(BaseProxy):
    """The proxy of a manager's ``Value``: ``v.value``, ``v.get()``, ``v.set(x)``."""
    _exposed_ = ("get", "set")

    def get(self) -> Any:
        """The managed value (``value`` reads it too): one round trip to the manager.

        Raises:
            fiber.errors.TransportError: the manager process is gone or unreachable.
        """
        return self._callmethod("get")

    def set(self, value: object) -> None:
        """Replace the managed value (assigning ``value`` does it too).

        Raises:
            fiber.errors.TransportError: the manager process is gone or unreachable.
        """
        self._callmethod("set", (value,))

    value = property(get, set)


BaseListProxy = MakeProxyType("BaseListProxy", _mp_exposed("BaseListProxy"))
BaseListProxy.__doc__ = """The methods of ``list`` on a managed list (the base of
`ListProxy`)."""


class ListProxy(BaseListProxy):  # type: ignore[misc,valid-type]
    """The proxy of a manager's ``list``: the methods of ``list``, each run by the manager.

    ``+=`` and ``*=`` change the managed list in place. As with multiprocessing, an item
    read out is a copy: changing it does not change the list (assign it back).
    """
    def __iadd__(self, value: Iterable[object]) -> ListProxy:
        self._callmethod("extend", (value,))
        return self

    def __imul__(self, value: int) -> ListProxy:
        self._callmethod("__imul__", (value,))
        return self


DictProxy = MakeProxyType("DictProxy", _mp_exposed("DictProxy"))
DictProxy.__doc__ = """The proxy of a manager's ``dict``: the methods of ``dict``, each run by the
manager; iterating it iterates the managed dict's keys (an `IteratorProxy`).

As with multiprocessing, a value read out is a copy: changing it does not change the
dict (assign it back: ``d[k] = v``)."""
DictProxy._method_to_typeid_ = {"__iter__": "Iterator"}  # type: ignore[attr-defined]
ArrayProxy = MakeProxyType("ArrayProxy", ("__len__", "__getitem__", "__setitem__"))
ArrayProxy.__doc__ = """The proxy of a manager's ``Array``: ``len(a)``, ``a[i]``, ``a[i:j]``,
``a[i] = x``, each one round trip to the manager."""
BasePoolProxy = MakeProxyType("BasePoolProxy", _mp_exposed("PoolProxy"))
BasePoolProxy.__doc__ = """The methods of `fiber.Pool` on a manager's pool (the base of
`PoolProxy`): ``apply``, ``map``, ``*_async``, ``imap``..., run by the manager."""


class PoolProxy(BasePoolProxy):  # type: ignore[misc,valid-type]
    """A manager's ``Pool``; as multiprocessing's, a context manager that terminates it."""

    def __enter__(self) -> PoolProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self._callmethod("terminate")


PoolProxy._method_to_typeid_ = {
    "apply_async": "AsyncResult", "map_async": "AsyncResult", "starmap_async": "AsyncResult",
    "imap": "Iterator", "imap_unordered": "Iterator"}  # as multiprocessing's PoolProxy
AsyncResultProxy = MakeProxyType("AsyncResultProxy", ("get", "wait", "ready", "successful"))
AsyncResultProxy.__doc__ = """The proxy of a result of a manager's pool (``apply_async``...):
``get``, ``wait``, ``ready``, ``successful``, as `fiber.pool.AsyncResult`."""


class DirectProxy(BaseProxy):
    """The proxy of a fiber object served by the manager's hub (a queue, a lock...): its
    attributes are the object's, called directly."""

    def __getattr__(self, name: str) -> Any:
        if name[:1] == "_":
            raise AttributeError(name)
        self._resolve()
        return getattr(self._direct, name)


class AcquirerProxy(DirectProxy):
    """The proxy of a manager's ``Lock``, ``RLock``, ``Semaphore`` or ``BoundedSemaphore``.

    Unlike multiprocessing's, ``acquire``/``release`` go to the fiber primitive served
    by the manager's hub directly (one round trip, its wait decided there); ``with``
    works. See `fiber.synchronize` for their semantics.
    """
    _exposed_: ClassVar[Optional[Tuple[str, ...]]] = ("acquire", "release")

    def __enter__(self) -> Any:
        return self._callmethod("acquire")

    def __exit__(self, *exc: object) -> None:
        self._callmethod("release")


class ConditionProxy(AcquirerProxy):
    """The proxy of a manager's ``Condition``: ``acquire``, ``release``, ``wait``,
    ``wait_for``, ``notify``, ``notify_all``, as `fiber.synchronize.Condition`.
    """
    _exposed_: ClassVar[Optional[Tuple[str, ...]]] = (
        "acquire", "release", "wait", "notify", "notify_all")


class EventProxy(DirectProxy):
    """The proxy of a manager's ``Event``: ``is_set``, ``set``, ``clear``, ``wait``, as
    `fiber.synchronize.Event` (served by the manager's hub, called directly).
    """
    _exposed_ = ("is_set", "set", "clear", "wait")


class BarrierProxy(DirectProxy):
    """The proxy of a manager's ``Barrier``: ``wait``, ``abort``, ``reset``, ``parties``...,
    as `fiber.synchronize.Barrier` (served by the manager's hub, called directly).
    """
    _exposed_ = ("wait", "abort", "reset")


class QueueProxy(DirectProxy):
    """The proxy of a manager's ``Queue`` or ``JoinableQueue``: the methods of
    `fiber.queues.JoinableQueue`.

    Calls go to the queue served by the manager's hub directly: ``q.get(timeout=1)`` is
    one round trip, its wait decided by that hub (multiprocessing's goes through a
    manager thread per call).
    """
    _exposed_ = ("put", "get", "put_nowait", "get_nowait", "qsize", "empty", "full",
                 "task_done", "join")
