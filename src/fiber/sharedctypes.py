"""``Value``, ``Array``, ``RawValue`` and ``RawArray``: ctypes data shared across hosts.

Each access is a round trip to the creator's hub; what works as in ``multiprocessing``
and what differs: the API reference's page of this module."""

from __future__ import annotations

import ctypes
import multiprocessing.sharedctypes as _mpsc
from multiprocessing.context import BaseContext
from types import MappingProxyType
from typing import (
    Any,
    Dict,
    Iterable,
    Iterator,
    List,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

from ._core._host_memory import AVAILABLE as _HOST_MEMORY
from ._core._host_memory import HostMemory, Locator, attach
from ._core._parking import tid as tid_of_thread
from ._core._served import Handle
from .synchronize import _primitives as synchronize
from .transport.operations import Handler, handles
from .transport.serialization import Frame, dumps, loads
from .transport.server import Peer, Server, Service

__all__ = ["Value", "Array", "RawValue", "RawArray", "copy", "SharedValue", "SharedArray",
           "SharedStructure", "Synchronized", "SynchronizedArray", "SynchronizedString",
           "SynchronizedStructure"]

_TYPE = Union[str, type]
typecode_to_type: Dict[str, Any] = _mpsc.typecode_to_type  # type: ignore[attr-defined]


class ValueOps:
    """The shared value protocol's operations (an access to the ctypes object)."""

    GET = b"get"
    SET = b"set"
    GETITEM = b"getitem"
    SETITEM = b"setitem"


class Access(NamedTuple):
    """Every request: the calling thread (b"": none, the access waits for no guard
    lock), then the frames of the access (its operation's record, decoded by its
    handler)."""

    tid: bytes
    args: Sequence[Frame]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Access:
        return cls(bytes(payload[0]), payload[1:])

    def frames(self) -> List[Frame]:
        return [self.tid, *self.args]


class Attribute(NamedTuple):
    """``get``: the attribute read (``value``, ``raw``, a structure's field)."""

    name: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Attribute:
        return cls(bytes(payload[0]).decode())

    def frames(self) -> List[Frame]:
        return [self.name.encode()]


class Assign(NamedTuple):
    """``set``: the attribute assigned, and its new value (pickled after the name)."""

    name: str
    value: Any

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Assign:
        return cls(bytes(payload[0]).decode(), loads(payload[1:]))

    def frames(self) -> List[Frame]:
        return [self.name.encode(), *dumps(self.value)]


class Item(NamedTuple):
    """``getitem``: the index or slice read (pickled)."""

    key: Union[int, slice]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Item:
        return cls(loads(payload))

    def frames(self) -> List[Frame]:
        return dumps(self.key)


class AssignItem(NamedTuple):
    """``setitem``: the index or slice assigned and its new value(s) (pickled as a pair)."""

    key: Union[int, slice]
    value: Any

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> AssignItem:
        key, value = loads(payload)
        return cls(key, value)

    def frames(self) -> List[Frame]:
        return dumps((self.key, self.value))


class ValueService(Service):
    """One ctypes object; accesses carrying a thread id wait for the guard lock."""

    protocol = "value"
    #: Every access it takes is answered (one waiting for the guard lock runs when the
    #: lock is freed, its connection there or not): asked again after a reset, an
    #: access is answered again, not run twice (see fiber.transport.receipts).
    answers_again = True

    def __init__(self, obj: Any, guard: Optional[synchronize.LockService],
                 memory: Optional[HostMemory] = None) -> None:
        self.obj = obj
        self.guard = guard
        self.memory = memory  # held while served: other processes of this host open it

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Frame]) -> None:
        """An `Access`: with a thread id, run when the guard lock is free or held by
        that thread (its ``get_lock()`` block); the handler decodes its arguments."""
        handler = self.handler(op)
        tid, args = Access.decode(payload)
        if self.guard is not None and tid:
            self.guard.run_guarded((peer.process_id, tid),
                                   lambda: self._run(handler, server, peer, req_id, args))
        else:
            self._run(handler, server, peer, req_id, args)

    def _run(self, handler: Handler, server: Server, peer: Peer, req_id: bytes,
             args: Sequence[Frame]) -> None:
        try:
            handler(self, server, peer, req_id, args)
        except Exception as e:
            server.reply_error(peer, req_id, e)

    @handles(ValueOps.GET, Attribute)
    def get(self, server: Server, peer: Peer, req_id: bytes, msg: Attribute) -> None:
        server.reply_value(peer, req_id, getattr(self.obj, msg.name))

    @handles(ValueOps.SET, Assign)
    def set(self, server: Server, peer: Peer, req_id: bytes, msg: Assign) -> None:
        setattr(self.obj, msg.name, msg.value)
        server.reply(peer, req_id, b"ok")

    @handles(ValueOps.GETITEM, Item)
    def getitem(self, server: Server, peer: Peer, req_id: bytes, msg: Item) -> None:
        server.reply_value(peer, req_id, self.obj[msg.key])

    @handles(ValueOps.SETITEM, AssignItem)
    def setitem(self, server: Server, peer: Peer, req_id: bytes, msg: AssignItem) -> None:
        self.obj[msg.key] = msg.value
        server.reply(peer, req_id, b"ok")


#: What a ``Value`` may hold besides simple types: its fields are served one by one.
_STRUCTURES = (ctypes.Structure, ctypes.Union)


def _ctype(typecode_or_type: _TYPE, structures: bool = False) -> Any:
    """The ctypes type of ``typecode_or_type``: a simple one, or (``structures``) also a
    structure or union.

    Raises:
        TypeError: neither (an array's items are simple types only: see the module).
    """
    t = typecode_to_type.get(typecode_or_type, typecode_or_type)  # type: ignore
    if isinstance(t, type) and (issubclass(t, ctypes._SimpleCData)  # noqa: SLF001
                                or (structures and issubclass(t, _STRUCTURES))):
        return t  # (ctypes names its simple types' base so)
    kinds = "simple ctypes types and structures" if structures else "simple ctypes types"
    raise TypeError(f"fiber shares typecodes and {kinds}, not {typecode_or_type!r}")


def _field_names(t: type) -> frozenset[str]:
    """The fields of structure type ``t``: its own, its bases', and those of its
    anonymous members (which ctypes makes attributes of ``t`` too)."""
    names = set()
    for cls in t.__mro__:
        fields = cls.__dict__.get("_fields_", ())
        anonymous = cls.__dict__.get("_anonymous_", ())
        for name, ftype, *_ in fields:
            names.add(name)
            if name in anonymous:
                names |= _field_names(ftype)
    return frozenset(names)


class SharedValue(Handle):
    """A ctypes value served by its creator's hub (``RawValue``; ``Value`` adds a lock)."""

    _asks_again = True  # an access outlives a reset (see Handle, ValueService)

    _lock: Any = None  # the lock taken by the server (None: unguarded)
    _client_lock: Any = None  # a lock taken by this side (a lock served elsewhere)
    _owner: Any = None  # what a get_obj() view keeps alive

    def __init__(self, obj: object, lock: object = None,
                 memory: Optional[HostMemory] = None) -> None:
        self._type_name = type(obj).__name__
        self._obj = obj  # only in the creator (not pickled): the ctypes object itself
        guard = None
        if lock is not None:
            guard = getattr(lock, "_service", None)  # set only where the lock was created
            self._lock = lock
            if guard is None:
                self._client_lock = lock
        super().__init__(ValueService(obj, guard, memory), b"V")

    def __getstate__(self) -> Tuple[Tuple[object, ...], str, object, object, object]:
        return (super().__getstate__(), self._type_name, self._lock, self._client_lock,
                self._extra_state())

    def __setstate__(self, state: Tuple[Tuple[object, ...], str, object, object, object]
                     ) -> None:
        base, self._type_name, self._lock, self._client_lock, extra = state
        super().__setstate__(base)
        self._set_extra_state(extra)

    def _extra_state(self) -> object:
        return None

    def _set_extra_state(self, extra: object) -> None:
        pass

    def _call(self, op: bytes, frames: Sequence[Frame]) -> Tuple[bytes, List[Frame]]:
        tid = tid_of_thread() if self._lock is not None and self._client_lock is None \
            else b""
        if self._client_lock is not None:
            with self._client_lock:
                return self._request(op, Access(tid, frames).frames())
        return self._request(op, Access(tid, frames).frames())

    def _get(self, attr: str) -> Any:
        return loads(self._call(ValueOps.GET, Attribute(attr).frames())[1])

    def _set(self, attr: str, value: object) -> None:
        self._call(ValueOps.SET, Assign(attr, value).frames())

    @property
    def value(self) -> Any:
        """The shared value: reading or assigning it is one round trip to the creator's hub.

        With a lock (``Value``), each access takes it, as multiprocessing's ``Synchronized``
        does; ``v.value += 1`` is a read then a write, atomic only inside ``with
        v.get_lock():``. Values convert, truncate and wrap as ctypes does in the creator.

        Raises:
            TypeError: (assignment) the value does not fit the ctypes type.
            fiber.errors.TransportError: the creator process is gone or unreachable.
        """
        return self._get("value")

    @value.setter
    def value(self, value: object) -> None:
        self._set("value", value)

    def _raw_view(self) -> object:
        """The same data without the lock (what ``get_obj()`` of a synchronized object
        gives): a handle to it."""
        raw = type(self).__new__(_RAW_OF.get(type(self), type(self)))
        raw.__setstate__(self.__getstate__())
        # a view of this module's class: its private state is set here
        raw._lock = raw._client_lock = None  # noqa: SLF001
        raw._owner = self  # noqa: SLF001 - keeps the service registered while the view lives
        return raw

    def __repr__(self) -> str:
        # as multiprocessing's RawValue, a ctypes object: c_int(1)
        try:
            value = repr(self.value)
        except Exception:
            value = "<unavailable>"
        return f"{self._type_name}({value})"


class _Synchronized:
    """What a lock adds to a shared value or array (mixed in first)."""

    def __repr__(self) -> str:
        # as multiprocessing's: <Synchronized wrapper for c_int(1)>
        return f"<{type(self).__name__} wrapper for {super().__repr__()}>"

    def get_lock(self) -> Any:
        """The lock that guards every access (a fiber ``RLock`` unless another was given)."""
        return self._lock  # type: ignore[attr-defined]

    def get_obj(self) -> Any:
        """The same data without the lock, as multiprocessing's raw ctypes object: for an
        array, a ctypes array over its memory (a buffer) in the creator and on its host;
        otherwise a handle to it (see the module)."""
        return self._raw_view()  # type: ignore[attr-defined]

    def acquire(self, *args: object) -> bool:
        """Acquire the lock (``acquire(block, timeout)`` of `fiber.synchronize.Lock`).

        Returns:
            True if the lock was taken, False if not blocking or the timeout passed.

        Raises:
            fiber.errors.TransportError: the lock's creator process is gone or unreachable.
        """
        return bool(self._lock.acquire(*args))  # type: ignore[attr-defined]

    def release(self) -> None:
        """Release the lock taken with ``acquire`` (or ``get_lock().acquire()``).

        Raises:
            ValueError: (Lock) it is not held.
            AssertionError: (RLock, the default) the calling thread does not own it.
        """
        self._lock.release()  # type: ignore[attr-defined]

    def __enter__(self) -> bool:
        return bool(self._lock.__enter__())  # type: ignore[attr-defined]

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)  # type: ignore[attr-defined]


class Synchronized(_Synchronized, SharedValue):
    """A ``Value`` with its lock: ``.value``, ``get_lock()``, ``get_obj()``, ``with v:``."""


class SharedStructure(SharedValue):
    """A ctypes structure (or union) served by its creator's hub: each field is an
    attribute, read or assigned in one round trip (``v.x *= 2`` is two), as the fields of
    multiprocessing's shared structure are."""

    _fields: frozenset[str] = frozenset()

    def __init__(self, obj: object, lock: object = None,
                 memory: Optional[HostMemory] = None) -> None:
        self._fields = _field_names(type(obj))
        super().__init__(obj, lock, memory)

    def _extra_state(self) -> frozenset[str]:
        return self._fields

    def _set_extra_state(self, extra: object) -> None:
        self._fields = cast("frozenset[str]", extra)  # as pickled by _extra_state

    def __getattr__(self, name: str) -> Any:
        # only for what normal lookup misses: the fields (the handle's own attributes
        # are found first, also while it is being unpickled)
        if name in self.__dict__.get("_fields", ()):
            return self._get(name)
        raise AttributeError(f"{self.__dict__.get('_type_name', 'structure')!r} object "
                             f"has no attribute {name!r}")

    def __setattr__(self, name: str, value: object) -> None:
        if name in self.__dict__.get("_fields", ()):
            self._set(name, value)
        else:
            super().__setattr__(name, value)

    def __dir__(self) -> List[str]:
        return sorted({*super().__dir__(), *self._fields})

    def __repr__(self) -> str:
        # as multiprocessing's, a ctypes structure: <...Point object at 0x...>
        return f"<{__name__}.{self._type_name} object at {id(self):#x}>"


class SynchronizedStructure(Synchronized, SharedStructure):
    """A ``Value`` of a structure, with its lock (a ``Synchronized``, as in
    multiprocessing)."""


class SharedArray(SharedValue):
    """A ctypes array served by its creator's hub: ``a[i]``, ``a[i:j]``, ``len(a)``; a
    synchronized one's ``get_obj()`` maps its memory on the creator's host (see the
    module)."""

    _view: Any = None  # the ctypes array over this host's mapping, once made

    def __init__(self, obj: Any, lock: object = None,
                 memory: Optional[HostMemory] = None) -> None:
        self._length = len(obj)
        self._item_type = obj._type_
        self._locator = memory.locator if memory is not None else None
        super().__init__(obj, lock, memory)

    def _extra_state(self) -> Tuple[int, type, Optional[Locator]]:
        return self._length, self._item_type, self._locator

    def _set_extra_state(self, extra: object) -> None:
        # as pickled by _extra_state
        self._length, self._item_type, self._locator = cast(
            "Tuple[int, type, Optional[Locator]]", extra)

    def _raw_view(self) -> object:
        """The array without the lock: a ctypes array over its memory (a buffer, as
        multiprocessing's) in the creator and on its host; elsewhere a handle."""
        local = self.__dict__.get("_obj")
        if local is not None:
            return local
        if self._view is None:
            mapping = attach(self._locator)
            if mapping is not None:
                self._view = (self._item_type * self._length).from_buffer(mapping)
        return self._view if self._view is not None else super()._raw_view()

    def __repr__(self) -> str:
        # as multiprocessing's RawArray, a ctypes array: <...c_int_Array_3 object at 0x...>
        return f"<{__name__}.{self._type_name} object at {id(self):#x}>"

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: Union[int, slice]) -> Any:
        return loads(self._call(ValueOps.GETITEM, Item(key).frames())[1])

    def __setitem__(self, key: Union[int, slice], value: object) -> None:
        self._call(ValueOps.SETITEM, AssignItem(key, value).frames())

    def __iter__(self) -> Iterator[Any]:
        return iter(self[:])  # one round trip: a snapshot


class SharedString(SharedArray):
    """A ``c_char`` array: also ``.value`` (up to the first NUL) and ``.raw``."""

    @property
    def raw(self) -> bytes:
        """All the array's bytes, NULs included (assign bytes to overwrite them from the start).

        Raises:
            ValueError: (assignment) more bytes than the array holds.
            fiber.errors.TransportError: the creator process is gone or unreachable.
        """
        return bytes(self._get("raw"))

    @raw.setter
    def raw(self, value: bytes) -> None:
        self._set("raw", value)


class SynchronizedArray(_Synchronized, SharedArray):
    """An ``Array`` with its lock."""


class SynchronizedString(_Synchronized, SharedString):
    """An ``Array('c', ...)`` with its lock."""


_RAW_OF = MappingProxyType({Synchronized: SharedValue, SynchronizedArray: SharedArray,
                            SynchronizedString: SharedString,
                            SynchronizedStructure: SharedStructure})


def _served_value(obj: object, lock: object = None) -> SharedValue:
    """The handle serving ctypes value ``obj``: raw without ``lock``, else synchronized."""
    structure = isinstance(obj, _STRUCTURES)
    if lock is None:
        return SharedStructure(obj) if structure else SharedValue(obj)
    return (SynchronizedStructure if structure else Synchronized)(obj, lock)


def _lock_for(lock: object) -> object:
    if lock is True or lock is None:  # None: a new lock too, as multiprocessing
        return synchronize.RLock()
    if not hasattr(lock, "acquire"):
        raise AttributeError(f"{lock!r} has no method 'acquire'")
    return lock


def RawValue(typecode_or_type: _TYPE, *args: object) -> SharedValue:  # noqa: N802
    """A shared ctypes value without a lock (each single access is still atomic).

    ``typecode_or_type`` is a typecode of `array` (``"i"``, ``"d"``...), a simple
    ctypes type or a ``ctypes.Structure`` (its fields are then attributes); ``args``
    initialize it. Use it when one process writes or when the accesses need no lock of
    their own; otherwise ``Value``.

    Raises:
        TypeError: not a typecode, simple ctypes type or structure, or ``args`` do not
            fit it.
    """
    return _served_value(_ctype(typecode_or_type, structures=True)(*args))


def _array(t: Any, size_or_initializer: Union[int, Iterable[object]]
           ) -> Tuple[Any, Optional[HostMemory]]:
    """A ctypes array of ``t`` in memory that this host's processes can map (where there
    is such memory), and that memory."""
    if isinstance(size_or_initializer, int):
        initial = (t * size_or_initializer)()
    else:
        items = list(size_or_initializer)
        initial = (t * len(items))(*items)
    if not _HOST_MEMORY:
        return initial, None
    memory = HostMemory(ctypes.sizeof(initial))
    obj = type(initial).from_buffer(memory.buffer)
    ctypes.memmove(obj, initial, ctypes.sizeof(initial))
    return obj, memory


def RawArray(typecode_or_type: _TYPE,  # noqa: N802
             size_or_initializer: Union[int, Iterable[object]]) -> SharedArray:
    """A shared ctypes array without a lock, of a size or from a sequence.

    ``size_or_initializer``: an int (that many zeroed items) or a sequence of the items.
    As multiprocessing's, it has no ``get_obj()``: an ``Array``'s gives a buffer (numpy)
    over its data on hosts with mappable memory.

    Raises:
        TypeError: not a typecode or simple ctypes type, or an item does not fit it.
    """
    t = _ctype(typecode_or_type)
    obj, memory = _array(t, size_or_initializer)
    return (SharedString if t is ctypes.c_char else SharedArray)(obj, memory=memory)


def Value(typecode_or_type: _TYPE, *args: object, lock: object = True,  # noqa: N802
          ctx: Optional[BaseContext] = None) -> SharedValue:
    """A shared ctypes value; with ``lock`` (default: a new fiber RLock) a Synchronized.

    ``lock``: True or None (a new RLock), False (a plain ``RawValue``), or a fiber lock
    to share with other objects. ``ctx`` is accepted as multiprocessing's; the value
    lives in this process whatever the backend.

    ``typecode_or_type`` may be a ``ctypes.Structure``, as for ``RawValue``.

    Raises:
        TypeError: not a typecode, simple ctypes type or structure, or ``args`` do not
            fit it.
        AttributeError: ``lock`` has no ``acquire`` method (as multiprocessing).
    """
    obj = _ctype(typecode_or_type, structures=True)(*args)
    return _served_value(obj, None if lock is False else _lock_for(lock))


def Array(typecode_or_type: _TYPE,  # noqa: N802
          size_or_initializer: Union[int, Iterable[object]], *,
          lock: object = True, ctx: Optional[BaseContext] = None) -> SharedArray:
    """A shared ctypes array; with ``lock`` (default: a new fiber RLock) synchronized.

    ``size_or_initializer`` and ``lock`` are as for ``RawArray`` and ``Value``.

    Raises:
        TypeError: not a typecode or simple ctypes type, or an item does not fit it.
        AttributeError: ``lock`` has no ``acquire`` method (as multiprocessing).
    """
    t = _ctype(typecode_or_type)
    obj, memory = _array(t, size_or_initializer)
    if lock is False:
        return (SharedString if t is ctypes.c_char else SharedArray)(obj, memory=memory)
    cls = SynchronizedString if t is ctypes.c_char else SynchronizedArray
    return cls(obj, _lock_for(lock), memory)


def copy(obj: object) -> SharedValue:

    """A new shared object (a ``RawValue`` or ``RawArray``) holding a copy of ``obj``, a
    ctypes value, structure or array, as ``multiprocessing.sharedctypes.copy``.

    Raises:
        TypeError: ``obj`` is not a simple ctypes value or structure, or an array of
            simple values (see the module).
    """
    if isinstance(obj, ctypes.Array):
        return RawArray(_ctype(obj._type_), obj[:])
    return _served_value(_ctype(type(obj), structures=True).from_buffer_copy(obj))
