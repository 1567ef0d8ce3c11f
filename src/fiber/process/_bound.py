"""``Process`` classes bound to one backend: what ``fiber.get_context(name).Process`` is.

A bound class starts its jobs on its backend whatever the configured default; it is
reachable by name in this module (``Process_slurm``; ``SpawnProcess`` for a context asked
for by a start method of multiprocessing), so that it pickles by reference.
An instance pickles as a plain `Process` with the same state: the
child needs no backend binding (and may not know a backend registered at run time in its
parent). A user's subclass of a bound class keeps its own class.
"""

from __future__ import annotations

import copyreg
from types import MappingProxyType
from typing import Dict, Optional, Protocol, Tuple, Type

from .._process_state import here
from ._process import Process

__all__ = ["process_class", "ProcessContext", "BackendContext"]


class ProcessContext(Protocol):
    """What a pool needs of its ``context`` (a `fiber.FiberContext`): the
    ``Process`` class its workers are."""

    @property
    def Process(self) -> Type[Process]:  # noqa: N802 - the multiprocessing name
        """The class of the context's processes (bound to its backend)."""


class BackendContext(Protocol):
    """What a manager needs of its ``ctx`` (a `fiber.FiberContext`): the backend
    its processes run on (None: the configured default)."""

    @property
    def backend(self) -> Optional[str]:
        """The backend's name, or None for the configured default."""


#: The class of a context asked for by a start method of multiprocessing: its name there.
_METHOD_CLASSES = MappingProxyType({"fork": "ForkProcess", "spawn": "SpawnProcess",
                                    "forkserver": "ForkServerProcess"})


def process_class(backend: Optional[str], method: Optional[str] = None) -> Type[Process]:
    """``Process`` bound to ``backend``; ``None``: the plain class (the configured default
    backend). One class per backend name, made on first use. With ``method`` (a start
    method of multiprocessing, meaning the default backend: ``backend`` is None), the
    class multiprocessing names after it (``SpawnProcess``), whose jobs say they were
    started with it (see `fiber.process._method`)."""
    if backend is None and method is None:
        return Process
    if backend is None:
        name = _METHOD_CLASSES[str(method)]
        attrs = {"_start_method": method}
    else:
        name = "Process_" + "".join(c if c.isalnum() else "_" for c in backend)
        attrs = {"_backend_name": backend}
    with here.jobs.bound_class_lock:
        cls = globals().get(name)
        if cls is None:
            cls = type(name, (Process,), {**attrs, "__module__": __name__,
                                          "__reduce__": _reduce_as_plain_process,
                                          "_named_as": "Process"})
            globals()[name] = cls
    return cls


def _reduce_as_plain_process(self: Process) -> Tuple[object, ...]:
    cls = type(self)
    if cls.__module__ != __name__:  # a user's subclass of a bound class: keep its class
        return (copyreg.__newobj__, (cls,), self.__getstate__())  # type: ignore[attr-defined]
    return (_plain_process, (self.__getstate__(),))


def _plain_process(state: Dict[str, object]) -> Process:
    proc = Process.__new__(Process)
    proc.__setstate__(state)
    return proc
