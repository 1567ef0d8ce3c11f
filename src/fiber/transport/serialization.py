"""Turning objects into message frames and back: pickle protocol 5 with large buffers out
of band, and the functions and classes of ``__main__`` by value. The design:
docs/contributing/transport.md, "Serialization"."""

from __future__ import annotations

import io
import mmap
import pickle
import socket
import types
from collections import ChainMap
from multiprocessing import connection as mp_connection
from multiprocessing import reduction
from typing import Any, Callable, List, Sequence, Tuple, Type, Union

import cloudpickle

from ._by_value import is_main_function, reduce_code, reduce_main_function
from ._main_namespace import fetch_sources_with

__all__ = ["dumps", "dumps_bytes", "loads", "pickles", "OOB_THRESHOLD", "Frame",
           "fetch_sources_with"]

#: Buffers at least this large go out of band; smaller ones are cheaper in the pickle.
OOB_THRESHOLD = 64 * 1024

#: A frame of a message: bytes-like; a large one read from another process of this host is
#: a mapping of its memfd (see `fiber.transport.memfd`).
Frame = Union[bytes, bytearray, memoryview, mmap.mmap]


class _LargeBuffer(Exception):
    """A buffer to send out of band: ``dumps``'s first try stops there."""


def _small_buffer(buf: pickle.PickleBuffer) -> bool:
    """``dumps``'s first try: every buffer in band, or it stops at a large one."""
    if buf.raw().nbytes >= OOB_THRESHOLD:
        raise _LargeBuffer
    return True


#: In a pickle made by plain ``pickle``: a ``multiprocessing`` Connection, whose descriptor
#: only ``_Pickler`` hands over (plain pickle copies its number; a socket refuses).
_CONNECTION_MARK = b"multiprocessing.connection"
#: Protocol 5's STACK_GLOBAL opcode: every global a pickle names (a class, a function,
#: the callable of a reduction, __main__'s among them) is pushed by it.
_STACK_GLOBAL = pickle.STACK_GLOBAL[0]


def _names_no_global(head: bytes) -> bool:
    """Whether the C pickler's ``head`` refers to nothing of ``__main__`` and to no
    ``multiprocessing`` connection: so where the opcode every global needs is absent
    (one ``in`` of an int, ~10 ns: plain data, the usual task's arguments), and else
    unless either's name is in it. (`find`, not `in`, for those: bytes' `in` first
    tries a bytes needle as an int, and raises and clears a TypeError each time.)"""
    return (_STACK_GLOBAL not in head
            or (head.find(b"__main__") < 0 and head.find(_CONNECTION_MARK) < 0))


def _as_multiprocessing_does(obj: object) -> Tuple[Callable[[bytes], object], Tuple[bytes]]:
    """``obj`` (a descriptor's holder) pickled by ``multiprocessing``'s own pickler, which
    hands the descriptor to its resource sharer; unpickled by plain pickle."""
    return pickle.loads, (bytes(reduction.ForkingPickler.dumps(obj)),)


class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle has no hints
    """cloudpickle's by-value pickling of dynamic functions, with out-of-band buffers.

    Code objects and the functions of ``__main__`` go fiber's own way (see
    `_by_value`): a code object keeps its file name, whatever cloudpickle does, and
    a function of ``__main__`` is rebuilt on the shared namespace by any unpickler.
    ``reducer_override`` is the pickle module's public hook, which cloudpickle implements.
    A Connection or socket of the standard library goes as ``multiprocessing`` sends it.
    """

    dispatch_table = ChainMap({mp_connection.Connection: _as_multiprocessing_does,
                               socket.socket: _as_multiprocessing_does},
                              cloudpickle.Pickler.dispatch_table)

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.CodeType:
            return reduce_code(obj)
        if is_main_function(obj):
            return reduce_main_function(obj)
        return super().reducer_override(obj)


def _stand_in(obj: object) -> Tuple[Type[int], Tuple[()]]:
    return int, ()


class _DryPickler(_Pickler):
    """`_Pickler` that hands nothing over: a Connection or socket pickles as a stand-in."""

    dispatch_table = ChainMap({mp_connection.Connection: _stand_in, socket.socket: _stand_in},
                              cloudpickle.Pickler.dispatch_table)


def pickles(obj: object) -> bool:
    """Whether ``dumps(obj)`` would succeed, without handing any descriptor over to the
    resource sharer (for finding what in a value cannot be pickled)."""
    try:
        _DryPickler(io.BytesIO(), protocol=5, buffer_callback=lambda buf: False).dump(obj)
    except Exception:
        return False
    return True


def dumps(obj: object) -> List[Frame]:
    """Serialize ``obj`` into frames: the pickle first, then one frame per large buffer.

    Raises:
        pickle.PicklingError, TypeError, AttributeError: ``obj`` cannot be pickled.
    """
    # The C pickler is several times cheaper than building a cloudpickle Pickler; its
    # output is kept unless it refers to __main__ (which the receiver may not have) or
    # it failed on something only cloudpickle handles (lambdas, local functions). Its
    # first try keeps every buffer in band and stops at the first large one: no closure
    # and no list are made for the usual small message (a third of its cost).
    large = False
    try:
        head = pickle.dumps(obj, protocol=5, buffer_callback=_small_buffer)
        if _names_no_global(head):
            return [head]
    except _LargeBuffer:
        large = True
    except (pickle.PicklingError, AttributeError, TypeError):
        pass
    buffers: List[Frame] = []

    def keep(buf: pickle.PickleBuffer) -> bool:
        view = buf.raw()
        if view.nbytes < OOB_THRESHOLD:
            return True  # in band
        buffers.append(view)
        return False

    if large:  # again, large buffers out of band (the first try stopped at one)
        try:
            head = pickle.dumps(obj, protocol=5, buffer_callback=keep)
            if _names_no_global(head):
                return [head, *buffers]
        except (pickle.PicklingError, AttributeError, TypeError):
            pass
        buffers.clear()
    out = io.BytesIO()
    _Pickler(out, protocol=5, buffer_callback=keep).dump(obj)
    # getvalue(), not getbuffer(): a memoryview exported from a BytesIO that outlives it (a
    # frame queued until interpreter shutdown) crashes Python 3.12 at exit ("deallocated
    # BytesIO object has exported buffers") and makes 3.13 print a BufferError. The copy is
    # of the pickle only; large buffers are out of band.
    return [out.getvalue(), *buffers]


def dumps_bytes(obj: object) -> bytes:
    """Serialize ``obj`` into one pickle, buffers in band, functions of ``__main__`` as with
    ``dumps``: for a pickle that travels inside another message (a job's launch payload).

    Raises:
        pickle.PicklingError, TypeError, AttributeError: ``obj`` cannot be pickled.
    """
    out = io.BytesIO()
    _Pickler(out, protocol=5).dump(obj)
    return out.getvalue()


def loads(frames: Sequence[Frame]) -> Any:
    """Rebuild the object from ``dumps`` frames (bytes, bytearrays or memoryviews)."""
    head = frames[0]
    if len(frames) == 1:  # the common small message: a third of the cost of the general path
        return pickle.loads(head)
    buffers = [f if isinstance(f, (bytearray, mmap.mmap)) else bytearray(f) for f in frames[1:]]
    return pickle.loads(memoryview(head), buffers=buffers)
