"""The program's main process, as each of its jobs knows it: the end of the lifelines. A
job whose lifeline to the master drops ends its own children and then itself, so that no
job outlives the program on a cluster. The design: docs/contributing/processes.md,
"Lineage"."""

from __future__ import annotations

import weakref
from typing import Any, Optional

from .._core import _runtime

__all__ = ["master_address", "set_master_address", "end_with_parent", "lifeline_address"]

_master: Optional[str] = None
_helpers: weakref.WeakSet[Any] = weakref.WeakSet()  # processes that end with their parent


def master_address() -> str:
    """The hub address of the program's main process (this process's own hub in it)."""
    return _master or _runtime.hub().address


def set_master_address(address: str) -> None:
    """In a job, before anything is started: the master's hub address (from its payload)."""
    global _master
    _master = address


def end_with_parent(process: object) -> None:
    """Make ``process`` (not started yet) end when this process ends: a helper job."""
    _helpers.add(process)


def lifeline_address(process: object) -> str:
    """The hub whose end ends the job of ``process``: this process's for a helper job,
    else the master's."""
    if process in _helpers:
        return _runtime.hub().address
    return master_address()
