"""Carrying an exception from one process to another, traceback included.

The exception itself travels when it pickles (so ``except ValueError`` works in the
caller), by value when its class was defined in the main script (so ``except MyError``
works too: cloudpickle gives the caller its own class back); otherwise a
`RemoteError` with its type name and message stands in. Either
way the formatted remote traceback becomes ``__cause__`` of the exception re-raised in the
caller, as ``concurrent.futures`` does. An error of the caller's own process that comes the
same way (a pool task that could not be pickled, a pool terminated) is raised as itself,
without a remote traceback (`pack_local_exception`).
"""

from __future__ import annotations

import os
import sys
import traceback
from types import TracebackType
from typing import Optional, Tuple

from ..errors import RemoteError, RemoteTraceback
from .serialization import dumps, loads

__all__ = ["pack_exception", "pack_local_exception", "unpack_exception", "user_traceback",
           "format_user_exception"]


#: fiber's own source files: the frames a traceback of the user's code starts with.
_FIBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: ... but for its conformance suite (fiber.testing.conformance): tests, and the targets of
#: their jobs, are code of a user of fiber.
_SUITE_DIR = os.path.join(_FIBER_DIR, "testing", "conformance") + os.sep


def _fibers(filename: str) -> bool:
    return filename.startswith(_FIBER_DIR) and not filename.startswith(_SUITE_DIR)


def user_traceback(exc: BaseException) -> Optional[TracebackType]:
    """``exc``'s traceback from its first frame outside fiber (the task, the target, the
    method called), or the whole of it if all of it is fiber's: what called the user's
    code in a job (the pool worker's loop, the bootstrap) tells the user nothing."""
    tb = exc.__traceback__
    first = tb
    while first is not None and _fibers(first.tb_frame.f_code.co_filename):
        first = first.tb_next
    return first if first is not None else tb


def format_user_exception(exc: BaseException) -> str:
    """``exc`` formatted as ``traceback.format_exception`` does, without fiber's frames
    before the user's (see `user_traceback`)."""
    return "".join(traceback.format_exception(type(exc), exc, user_traceback(exc)))


def pack_exception(exc: BaseException) -> Tuple[Optional[BaseException], str, str, str]:
    """A picklable record of ``exc``: (exception or None, type name, message, traceback)."""
    tb = format_user_exception(exc)
    if sys.version_info < (3, 11):  # the notes, which 3.11's traceback prints last
        tb += "".join(f"{note}\n" for note in getattr(exc, "__notes__", ()))
    return _carried(exc), type(exc).__qualname__, str(exc), tb


def _carried(exc: BaseException) -> Optional[BaseException]:
    """``exc`` if it survives pickling, else None (a `RemoteError` stands in)."""
    try:
        loads(dumps(exc))
    except Exception:
        return None
    return exc


def pack_local_exception(exc: BaseException
                         ) -> Tuple[Optional[BaseException], str, str, Optional[str]]:
    """A record of ``exc``, raised in this process, for a result that travels through
    the same channel as a remote one (a pool task that could not be pickled, a pool
    broken or terminated, a task that killed its workers): unpacked, it is raised as
    itself, with no remote traceback, since nothing of it happened in another process.
    Each unpacking makes a copy: one error may fail many results, raised in many threads."""
    return _carried(exc), type(exc).__qualname__, str(exc), None


def unpack_exception(record: Tuple[object, str, str, Optional[str]],
                     local: bool = False) -> BaseException:
    """The exception to raise in the caller, with the remote traceback as ``__cause__``;
    none for a record of `pack_local_exception`, nor if ``local`` (it was raised
    by this very process: its own hub serving one of its objects)."""
    carried, type_name, message, tb = record
    if isinstance(carried, BaseException):
        exc = carried
    else:
        exc = RemoteError(type_name, message, tb or "")
    if tb is not None and not local:
        exc.__cause__ = RemoteTraceback(tb)
        if isinstance(exc, RemoteError) and not exc.remote_traceback:
            exc.remote_traceback = tb  # an error that is a RemoteError and its own type
    return exc
