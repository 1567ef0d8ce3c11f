"""The start method a process says it was started with (``get_start_method()``).

In ``multiprocessing`` a child knows its start method: a ``spawn`` child is told its
parent's (its preparation data), and a process of a context's class (``SpawnProcess``)
sets its own as it starts. fiber does the same with the names that mean its default
backend (``"spawn"``, ``"forkserver"``, ``"fork"``, see `fiber.context`): a job's launch
payload carries its process class's ``_start_method``, else its parent's
`default_method`, which the job takes as its own (`fiber.process._bootstrap`).

The state is one name per process (``here.jobs.default_method``): set by
``set_start_method`` in the program, taken from the payload in a job, inherited
unchanged by a fork (a forked job gets it again from its payload).
"""

from __future__ import annotations

from typing import Optional

from .._process_state import here

__all__ = ["default_method", "set_default_method", "METHODS", "chosen", "choose"]

#: multiprocessing's start methods, each meaning fiber's default backend.
METHODS = ("fork", "spawn", "forkserver")


def chosen() -> bool:
    """Whether this process's start method was set: by ``set_start_method`` (a backend's
    name or a method's), or by its job's payload; as ``multiprocessing``'s default
    context's, which then refuses to be set again without ``force``."""
    state = here.jobs
    return state.method_chosen or state.default_method is not None


def choose(on: bool) -> None:
    """``set_start_method`` picked one (True), or was told to forget it (False)."""
    here.jobs.method_chosen = on


def default_method() -> Optional[str]:
    """The start method this process's default context was set to (or that its job was
    started with); None: none, the backend's name stands for it."""
    return here.jobs.default_method


def set_default_method(method: Optional[str]) -> None:
    """Make ``method`` (one of `METHODS`, or None) this process's default start method.

    Raises:
        ValueError: ``method`` is not one of `METHODS` or None.
    """
    if method is not None and method not in METHODS:
        raise ValueError(f"not a start method of multiprocessing: {method!r}")
    here.jobs.default_method = method
