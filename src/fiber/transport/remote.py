"""Carrying an exception from one process to another, traceback included.

The exception itself travels when it pickles (so ``except ValueError`` works in the
caller), by value when its class was defined in the main script (so ``except MyError``
works too: cloudpickle gives the caller its own class back); otherwise a
:class:`RemoteError` with its type name and message stands in. Either
way the formatted remote traceback becomes ``__cause__`` of the exception re-raised in the
caller, as ``concurrent.futures`` does.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Tuple

from ..errors import RemoteError, RemoteTraceback
from .serialization import dumps, loads

__all__ = ["pack_exception", "unpack_exception"]


def pack_exception(exc: BaseException) -> Tuple[Any, str, str, str]:
    """A picklable record of ``exc``: (exception or None, type name, message, traceback)."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if sys.version_info < (3, 11):  # the notes, which 3.11's traceback prints last
        tb += "".join(f"{note}\n" for note in getattr(exc, "__notes__", ()))
    try:
        loads(dumps(exc))
        carried: Any = exc
    except Exception:
        carried = None
    return carried, type(exc).__qualname__, str(exc), tb


def unpack_exception(record: Tuple[Any, str, str, str]) -> BaseException:
    """The exception to raise in the caller, with the remote traceback as ``__cause__``."""
    carried, type_name, message, tb = record
    exc = carried if isinstance(carried, BaseException) else RemoteError(type_name, message, tb)
    exc.__cause__ = RemoteTraceback(tb)
    return exc
