"""``Process`` classes bound to one backend: what ``fiber.get_context(name).Process`` is.

A bound class starts its jobs on its backend whatever the configured default; it is
reachable by name in this module (``Process_slurm``), so that it pickles by reference.
An instance pickles as a plain `Process` with the same state: the
child needs no backend binding (and may not know a backend registered at run time in its
parent). A user's subclass of a bound class keeps its own class.
"""

from __future__ import annotations

import copyreg
import threading
from typing import Any, Dict, Optional, Protocol, Type

from ._process import Process

__all__ = ["process_class", "ProcessContext", "BackendContext"]


class ProcessContext(Protocol):
    """What a pool needs of its ``context`` (a `fiber.FiberContext`): the
    ``Process`` class its workers are."""

    @property
    def Process(self) -> Type[Process]: ...  # noqa: N802 - the multiprocessing name


class BackendContext(Protocol):
    """What a manager needs of its ``ctx`` (a `fiber.FiberContext`): the backend
    its processes run on (None: the configured default)."""

    @property
    def backend(self) -> Optional[str]: ...

_lock = threading.Lock()


def process_class(backend: Optional[str]) -> Type[Process]:
    """``Process`` bound to ``backend``; ``None``: the plain class (the configured default
    backend). One class per backend name, made on first use."""
    if backend is None:
        return Process
    name = "Process_" + "".join(c if c.isalnum() else "_" for c in backend)
    with _lock:
        cls = globals().get(name)
        if cls is None:
            cls = type(name, (Process,), {"_backend_name": backend, "__module__": __name__,
                                          "__reduce__": _reduce_as_plain_process,
                                          "_named_as": "Process"})
            globals()[name] = cls
    return cls


def _reduce_as_plain_process(self: Process) -> Any:
    cls = type(self)
    if cls.__module__ != __name__:  # a user's subclass of a bound class: keep its class
        return (copyreg.__newobj__, (cls,), self.__getstate__())  # type: ignore[attr-defined]
    return (_plain_process, (self.__getstate__(),))


def _plain_process(state: Dict[str, Any]) -> Process:
    proc = Process.__new__(Process)
    proc.__setstate__(state)
    return proc
