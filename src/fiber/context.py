"""Contexts: the backend is the start method.

``fiber.get_context("slurm")`` returns a context whose ``Process``, ``Pool``, ``Queue``...
run on Slurm, as ``multiprocessing.get_context("spawn")`` binds a start method. The names
are backend names; ``"spawn"`` (what libraries such as stable-baselines3 ask for),
``"forkserver"`` (what PyTorch programs often ask for: children that start clean, as
fiber's do) and ``None`` mean the configured default backend, and such a context's
``get_start_method()`` is the name asked for, as multiprocessing's is.

More: the API reference's page of this module."""

# FiberContext is a BaseContext whose methods return fiber's objects (a fiber Queue, not a
# multiprocessing.queues.Queue), as its start methods and backends are fiber's: the
# standard library's stubs type them as its own, so mypy's override check is off here.
# mypy: disable-error-code="override"

from __future__ import annotations

import logging
import multiprocessing.context
import os
import warnings
from types import MappingProxyType, ModuleType
from typing import Any, Callable, Iterable, List, Optional, Tuple, Type, Union

from . import connection, errors, process, queues, sharedctypes, synchronize
from ._process_state import here
from .backends import known_backends, registered_name
from .config import get_config, init
from .errors import UnknownBackendError
from .managers import SyncManager
from .pool import Pool
from .process._bound import process_class
from .process._method import METHODS, choose, chosen, default_method, set_default_method

__all__ = ["FiberContext", "get_context", "DefaultContext", "ForkContext", "SpawnContext",
           "ForkServerContext"]

_DEFAULT_ALIASES = ("spawn", "forkserver")
#: Start methods of multiprocessing that mean the default backend (see the module).
_ACCEPTED_METHODS = METHODS

_FORK_WARNING = (
    "fiber: start method 'fork' means fiber's default backend here: a fiber process is a "
    "job (maybe on another host) that starts clean, as with 'spawn', and does not inherit "
    "this process's memory; pass what a child needs in its arguments")


class FiberContext(multiprocessing.context.BaseContext):
    """The multiprocessing API bound to one backend (None: the configured default);
    ``method`` is the start method it was asked for by (``"spawn"``...), if any.

    A subclass of the standard library's ``BaseContext``, so that a library that checks
    for a context object (PyTorch's ``DataLoader(multiprocessing_context=...)``) takes
    it; each public method and attribute of ``BaseContext`` is overridden by fiber's.
    """

    ProcessError = errors.ProcessError
    BufferTooShort = connection.BufferTooShort
    TimeoutError = errors.TimeoutError
    AuthenticationError = errors.AuthenticationError

    def __init__(self, backend: Optional[str] = None, method: Optional[str] = None) -> None:
        self._backend = backend
        self._method = method

    @property
    def backend(self) -> Optional[str]:
        """The backend this context is bound to; None: the configured default."""
        return self._backend

    # -- processes ----------------------------------------------------------------------

    @property
    def Process(self) -> Type[process.Process]:  # noqa: N802 - the multiprocessing name
        """``Process`` bound to this context's backend (``SpawnProcess``... for a context
        asked for by a start method of multiprocessing)."""
        return process_class(self._backend, self._method)

    def current_process(self) -> process.Process:
        """The `fiber.Process` object of the calling process."""
        return process.current_process()

    def parent_process(self) -> Optional[process.Process]:
        """The parent of the calling process, or None in the main process.

        As `fiber.parent_process`: in a job, its ``is_alive()`` and ``join()`` follow the
        parent over the job's connection to it.
        """
        return process.parent_process()

    def active_children(self) -> List[process.Process]:
        """Started children of this process that have not ended yet, on any backend."""
        return process.active_children()

    def cpu_count(self) -> int:
        """CPUs of this machine, as ``multiprocessing.cpu_count`` (not of the cluster).

        Raises:
            NotImplementedError: the number cannot be determined (as multiprocessing).
        """
        count = os.cpu_count()
        if count is None:
            raise NotImplementedError("cannot determine number of cpus")
        return count

    # -- communication ------------------------------------------------------------------

    def Pipe(self, duplex: bool = True  # noqa: N802
             ) -> Tuple[connection.Connection, connection.Connection]:
        """Two connected ends (see `fiber.Pipe`); with ``duplex=False``, the first end only
        receives and the second only sends.

        The pipe is served by this process's hub, whatever the context's backend.
        """
        return connection.Pipe(duplex)

    def Queue(self, maxsize: int = 0) -> queues.Queue[Any]:  # noqa: N802
        """A `fiber.queues.Queue` (``maxsize`` <= 0: unbounded), served by this process.

        Raises:
            TypeError: ``maxsize`` is not an int.
        """
        return queues.Queue(maxsize, ctx=self)

    def JoinableQueue(self, maxsize: int = 0) -> queues.JoinableQueue[Any]:  # noqa: N802
        """A `fiber.queues.JoinableQueue`, with ``task_done`` and ``join``.

        Raises:
            TypeError: ``maxsize`` is not an int.
        """
        return queues.JoinableQueue(maxsize, ctx=self)

    def SimpleQueue(self) -> queues.SimpleQueue[Any]:  # noqa: N802
        """A `fiber.queues.SimpleQueue`: unbounded, with ``put``, ``get``, ``empty``."""
        return queues.SimpleQueue(ctx=self)

    def Pool(self, processes: Optional[int] = None,  # noqa: N802
             initializer: Optional[Callable[..., object]] = None,
             initargs: Iterable[object] = (), maxtasksperchild: Optional[int] = None,
             **kwargs: Any) -> Pool:
        """A `fiber.Pool` whose workers are jobs on this context's backend.

        Arguments are those of `fiber.Pool` (``kwargs``: ``cpu``, ``memory``, ``gpu``,
        ``error_handling``).

        Raises:
            ValueError, TypeError: bad arguments, as listed by `fiber.Pool`.
        """
        return Pool(processes, initializer, initargs, maxtasksperchild, context=self, **kwargs)

    # -- synchronization and shared data (fiber.synchronize, fiber.sharedctypes) --------

    def Lock(self) -> synchronize.Lock:  # noqa: N802
        """A `fiber.synchronize.Lock`, served by this process (usable from any host)."""
        return synchronize.Lock(ctx=self)

    def RLock(self) -> synchronize.RLock:  # noqa: N802
        """A `fiber.synchronize.RLock` (reentrant), served by this process."""
        return synchronize.RLock(ctx=self)

    def Semaphore(self, value: int = 1) -> synchronize.Semaphore:  # noqa: N802
        """A `fiber.synchronize.Semaphore` starting at ``value``, served by this process.

        Raises:
            ValueError: ``value`` < 0.
        """
        return synchronize.Semaphore(value, ctx=self)

    def BoundedSemaphore(self, value: int = 1) -> synchronize.BoundedSemaphore:  # noqa: N802
        """A `fiber.synchronize.BoundedSemaphore`: ``release`` above ``value`` fails.

        Raises:
            ValueError: ``value`` < 0.
        """
        return synchronize.BoundedSemaphore(value, ctx=self)

    def Condition(self, lock: Optional[synchronize.Lock] = None  # noqa: N802
                  ) -> synchronize.Condition:
        """A `fiber.synchronize.Condition` over ``lock`` (None: a new fiber RLock).

        Raises:
            TypeError: ``lock`` is not a fiber ``Lock`` or ``RLock``.
        """
        return synchronize.Condition(lock, ctx=self)

    def Event(self) -> synchronize.Event:  # noqa: N802
        """A `fiber.synchronize.Event`, served by this process."""
        return synchronize.Event(ctx=self)

    def Barrier(self, parties: int,  # noqa: N802
                action: Optional[Callable[[], object]] = None,
                timeout: Optional[float] = None) -> synchronize.Barrier:
        """A `fiber.synchronize.Barrier` for ``parties`` processes, served by this one.

        Raises:
            ValueError: ``parties`` < 1.
        """
        return synchronize.Barrier(parties, action, timeout, ctx=self)

    def Value(self, typecode_or_type: Union[str, type], *args: object,  # noqa: N802
              lock: object = True) -> sharedctypes.SharedValue:
        """A shared ctypes value (see `fiber.sharedctypes.Value`), served by this process.

        Raises:
            TypeError: not a typecode or simple ctypes type, or ``args`` do not fit it.
            AttributeError: ``lock`` has no ``acquire`` method.
        """
        return sharedctypes.Value(typecode_or_type, *args, lock=lock, ctx=self)

    def Array(self, typecode_or_type: Union[str, type],  # noqa: N802
              size_or_initializer: Union[int, Iterable[object]], *,
              lock: object = True) -> sharedctypes.SharedArray:
        """A shared ctypes array (see `fiber.sharedctypes.Array`), served by this process.

        Raises:
            TypeError: not a typecode or simple ctypes type, or an item does not fit it.
            AttributeError: ``lock`` has no ``acquire`` method.
        """
        return sharedctypes.Array(typecode_or_type, size_or_initializer, lock=lock, ctx=self)

    def RawValue(self, typecode_or_type: Union[str, type],  # noqa: N802
                 *args: object) -> sharedctypes.SharedValue:
        """A shared ctypes value without a lock (see `fiber.sharedctypes.RawValue`).

        Raises:
            TypeError: not a typecode or simple ctypes type, or ``args`` do not fit it.
        """
        return sharedctypes.RawValue(typecode_or_type, *args)

    def RawArray(self, typecode_or_type: Union[str, type],  # noqa: N802
                 size_or_initializer: Union[int, Iterable[object]]
                 ) -> sharedctypes.SharedArray:
        """A shared ctypes array without a lock (see `fiber.sharedctypes.RawArray`).

        Raises:
            TypeError: not a typecode or simple ctypes type, or an item does not fit it.
        """
        return sharedctypes.RawArray(typecode_or_type, size_or_initializer)

    def Manager(self) -> SyncManager:  # noqa: N802
        """A started `fiber.managers.SyncManager` whose server runs on this backend."""
        manager = SyncManager(ctx=self)
        manager.start()
        return manager

    # -- contexts -----------------------------------------------------------------------

    def get_context(self, method: Optional[str] = None) -> FiberContext:
        """This context (``method`` None), else the context of backend or start method
        ``method`` (see `fiber.get_context`).

        Raises:
            fiber.errors.UnknownBackendError: no backend or start method of that name (a
                ``ValueError``, as multiprocessing raises).
        """
        return self if method is None else get_context(method)

    def get_start_method(self, allow_none: bool = False) -> Optional[str]:
        """The start method this context was asked for (``"spawn"``...), else the backend
        it starts processes on."""
        return self._method or self._backend or get_config().backend

    def set_start_method(self, method: Optional[str], force: bool = False) -> None:
        """Refused, as by multiprocessing's concrete contexts: the default context's
        (``fiber.set_start_method``) sets the program's.

        Raises:
            ValueError: always.
        """
        raise ValueError("cannot set start method of concrete context")

    def get_all_start_methods(self) -> List[str]:
        """Every backend name, plus ``"spawn"`` and ``"forkserver"`` for the default one."""
        return [*known_backends(), *_DEFAULT_ALIASES]

    def set_executable(self, executable: str | bytes | os.PathLike[str]) -> None:
        """Make jobs run the Python interpreter ``executable`` (the ``python`` config key).

        In multiprocessing it names the interpreter of spawned children; here it applies to
        every job this program starts from now on, on every backend (a path that must exist
        where the jobs run: on the cluster's hosts or in the image). A ``str``, ``bytes`` or
        path-like object, as multiprocessing accepts.

        Raises:
            TypeError: ``executable`` is not a path.
        """
        init(python=os.fsdecode(executable))

    def set_forkserver_preload(self, module_names: List[str]) -> None:
        """Accepted for compatibility; fiber jobs import what they unpickle.

        Raises:
            TypeError: an item of ``module_names`` is not a string (as multiprocessing's).
        """
        if not all(type(mod) is str for mod in module_names):
            raise TypeError("module_names must be a list of strings")

    def freeze_support(self) -> None:
        """Accepted for compatibility (frozen Windows executables only)."""

    def allow_connection_pickling(self) -> None:
        """Fiber connections always pickle."""

    def get_logger(self) -> logging.Logger:
        """The ``"fiber"`` logger (multiprocessing's is named ``"multiprocessing"``)."""
        import logging

        return logging.getLogger("fiber")

    def log_to_stderr(self, level: Optional[int] = None) -> logging.Logger:
        """Add a stderr handler to the ``"fiber"`` logger, set its ``level`` if given, return it.

        As multiprocessing's ``log_to_stderr``, with its format ``[LEVEL/process] message``;
        unlike it, each call adds another handler, so call it once.
        """
        import logging

        logger = self.get_logger()
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(levelname)s/%(processName)s] %(message)s"))
        logger.addHandler(handler)
        if level is not None:
            logger.setLevel(level)
        return logger

    @property
    def reducer(self) -> ModuleType:
        """The standard library's ``multiprocessing.reduction`` module (read-only here).

        Fiber pickles with its own serializer (functions and classes of ``__main__`` by
        value), so a custom reducer cannot be installed: assigning this raises
        ``AttributeError``.
        """
        import multiprocessing.reduction

        return multiprocessing.reduction

    @reducer.setter
    def reducer(self, reduction: object) -> None:
        raise AttributeError("fiber pickles with its own serializer: a context's reducer "
                             "cannot be replaced")

    def __repr__(self) -> str:
        method = f" method={self._method}" if self._method else ""
        return f"<fiber context backend={self._backend or 'default'}{method}>"


class ForkContext(FiberContext):
    """The context of start method ``"fork"``: the default backend (see the module)."""


class SpawnContext(FiberContext):
    """The context of start method ``"spawn"``: the default backend."""


class ForkServerContext(FiberContext):
    """The context of start method ``"forkserver"``: the default backend."""


_METHOD_CONTEXTS = MappingProxyType({"fork": ForkContext, "spawn": SpawnContext,
                                     "forkserver": ForkServerContext})


class DefaultContext(FiberContext):
    """The module-level API of ``fiber``: the default backend, under the start method that
    ``set_start_method`` named, if any (as multiprocessing's default context). Its state
    is the process's start method, so that every instance is the same context."""

    def get_context(self, method: Optional[str] = None) -> FiberContext:
        """The context ``set_start_method`` picked (``method`` None), else the context of
        backend or start method ``method`` (see `fiber.get_context`).

        Raises:
            fiber.errors.UnknownBackendError: no backend or start method of that name.
        """
        return _context_of(default_method()) if method is None else get_context(method)

    def get_start_method(self, allow_none: bool = False) -> Optional[str]:
        """The start method ``set_start_method`` named (or that this job was started
        with), else the default backend's name; with ``allow_none``, None while none was
        set (as ``multiprocessing`` says before ``set_start_method``)."""
        if allow_none and not chosen():
            return None
        return default_method() or get_config().backend

    def set_start_method(self, method: Optional[str], force: bool = False) -> None:
        """Make ``method`` the program's start method: a backend's name makes it the
        default backend; ``"spawn"``, ``"forkserver"`` and ``"fork"`` (with a warning)
        keep the default backend under that name; None with ``force`` forgets it.

        Raises:
            RuntimeError: a start method was set already, and not ``force``
                (as in ``multiprocessing``: "context has already been set").
            ValueError (UnknownBackendError): no backend or start method of that name.
        """
        if chosen() and not force:
            raise RuntimeError("context has already been set")
        if method is None:
            set_default_method(None)
            choose(False)
            return
        if method in _ACCEPTED_METHODS and method not in known_backends():
            if method == "fork":
                warnings.warn(_FORK_WARNING, RuntimeWarning, stacklevel=3)
            set_default_method(method)
            choose(True)
            return
        get_context(method)  # raises for unknown names
        init(backend=method)
        set_default_method(None)
        choose(True)


def get_context(method: Optional[str] = None) -> FiberContext:
    """The context of backend ``method`` (its name in any case: ``"SLURM"`` is ``slurm``);
    ``"spawn"``, ``"forkserver"`` or ``"fork"`` (with a ``RuntimeWarning``) the default
    backend under that name (see the module); ``None``: the one ``set_start_method``
    picked, the default backend's if none.

    Raises:
        ValueError (UnknownBackendError): no backend or start method of that name.
    """
    if method is None:
        return _context_of(default_method())
    backend = registered_name(method)  # in any case: "SLURM" is slurm
    if backend is not None:
        return _context_of(backend)
    if method not in _ACCEPTED_METHODS:
        raise UnknownBackendError(method, [*known_backends(), *_DEFAULT_ALIASES])
    if method == "fork":
        warnings.warn(_FORK_WARNING, RuntimeWarning, stacklevel=2)
    return _context_of(method)


def _context_of(method: Optional[str]) -> FiberContext:
    """The context of a checked ``method`` (None: the default backend's), made once."""
    api = here.api
    with api.contexts_lock:
        ctx = api.contexts.get(method)
        if ctx is None:
            made = _METHOD_CONTEXTS.get(method) if method is not None else None
            if made is not None and method not in known_backends():
                ctx = made(None, method)
            else:
                ctx = FiberContext(method)
            api.contexts[method] = ctx
        return ctx

