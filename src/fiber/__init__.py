"""fiber: the ``multiprocessing`` API on a computer cluster.

``import fiber as multiprocessing`` turns a multiprocessing program into one whose
processes are jobs on the configured backend (``local`` subprocesses by default; see
`fiber.config`). Importing fiber reads no configuration, starts no thread and opens
no socket: all of that happens on first use.
"""

from __future__ import annotations

import logging
import os
from typing import List, Optional

from . import _exports, _version, errors, futures, managers
from ._core import _runtime
from ._core._shared import Shared
from ._core._shared import share as shared
from ._version import __version__ as __version__
from .config import Config, get_config, init, reset
from .connection import BufferTooShort, Pipe
from .context import DefaultContext as _DefaultContext
from .context import FiberContext, get_context
from .errors import (
    AuthenticationError,
    FiberError,
    ProcessError,
    RemoteError,
    TimeoutError,
)
from .meta import meta
from .pool import Pool
from .process import Process, active_children, current_process, parent_process
from .queues import JoinableQueue, Queue, SimpleQueue
from .ring import Ring
from .sharedctypes import Array, RawArray, RawValue, Value
from .synchronize import (
    Barrier,
    BoundedSemaphore,
    BrokenBarrierError,
    Condition,
    Event,
    Lock,
    RLock,
    Semaphore,
)

_exports.publish(__name__, Shared)


def _serve_dashboard() -> None:
    """The program's dashboard, if its config asks for one: with the main process's hub
    (imported then only: a program without one does not load the HTTP server)."""
    address = get_config().dashboard
    if address:
        from .dashboard import serve_program

        serve_program(address)


_runtime.on_main_hub(_serve_dashboard)
_default = _DefaultContext()
_version.warn_if_shadowed(__path__[0])


def cpu_count() -> int:
    """Number of CPUs of this machine (as ``multiprocessing.cpu_count``)."""
    return _default.cpu_count()


def Manager() -> managers.SyncManager:  # noqa: N802 - the multiprocessing name
    """A started `fiber.managers.SyncManager` (its server is a job)."""
    return _default.Manager()


def get_start_method(allow_none: bool = False) -> Optional[str]:
    """The start method ``set_start_method`` named (in a job: that it was started with),
    else the default backend's name; with ``allow_none``, None while none was set."""
    return _default.get_start_method(allow_none)


def set_start_method(method: Optional[str], force: bool = False) -> None:
    """Make backend ``method`` the default; ``"spawn"``, ``"forkserver"`` and ``"fork"``
    (with a warning) keep the configured one under that name (see `fiber.context`).

    Raises:
        RuntimeError: one was set already, and not ``force`` (as in multiprocessing).
        ValueError: no backend or start method of that name.
    """
    _default.set_start_method(method, force)


def get_all_start_methods() -> List[str]:
    """Every backend name, plus ``"spawn"`` and ``"forkserver"`` meaning the default one."""
    return _default.get_all_start_methods()


def set_executable(executable: str | bytes | os.PathLike[str]) -> None:
    """Make jobs run the Python interpreter ``executable`` (the ``python`` config key): a
    ``str``, ``bytes`` or path-like object, as multiprocessing accepts.

    Unlike multiprocessing's (the interpreter of spawned children), it applies to every
    job started from now on, on every backend: the path must exist where jobs run.

    Raises:
        TypeError: ``executable`` is not a path.
    """
    _default.set_executable(executable)


def set_forkserver_preload(module_names: List[str]) -> None:
    """Accepted for compatibility and ignored: fiber jobs start clean and import what they
    unpickle (the local backend's ``local_preload`` config key preloads modules).

    Raises:
        TypeError: an item of ``module_names`` is not a string (as multiprocessing's).
    """
    _default.set_forkserver_preload(module_names)


def freeze_support() -> None:
    """Accepted for compatibility; does nothing (it matters for frozen Windows executables)."""
    _default.freeze_support()


def allow_connection_pickling() -> None:
    """Accepted for compatibility; fiber connections (``Pipe`` ends) always pickle."""
    _default.allow_connection_pickling()


def get_logger() -> logging.Logger:
    """The ``"fiber"`` logger, where fiber logs (multiprocessing's is ``"multiprocessing"``)."""
    return _default.get_logger()


def log_to_stderr(level: Optional[int] = None) -> logging.Logger:
    """Add a stderr handler to the ``"fiber"`` logger, set its ``level`` if given, return it.

    Each call adds another handler (multiprocessing's adds one once): call it once.
    """
    return _default.log_to_stderr(level)


reducer = _default.reducer

__all__ = [
    "Array",
    "AuthenticationError",
    "Barrier",
    "BoundedSemaphore",
    "BrokenBarrierError",
    "BufferTooShort",
    "Condition",
    "Config",
    "Event",
    "FiberContext",
    "FiberError",
    "JoinableQueue",
    "Lock",
    "Manager",
    "Pipe",
    "Pool",
    "Process",
    "ProcessError",
    "Queue",
    "RLock",
    "RawArray",
    "RawValue",
    "RemoteError",
    "Ring",
    "Semaphore",
    "Shared",
    "SimpleQueue",
    "TimeoutError",
    "Value",
    "active_children",
    "allow_connection_pickling",
    "cpu_count",
    "current_process",
    "errors",
    "futures",
    "freeze_support",
    "get_all_start_methods",
    "get_config",
    "get_context",
    "get_logger",
    "get_start_method",
    "init",
    "log_to_stderr",
    "managers",
    "meta",
    "parent_process",
    "reducer",
    "reset",
    "set_executable",
    "set_forkserver_preload",
    "set_start_method",
    "shared",
]
