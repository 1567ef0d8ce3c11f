"""The program's main process, as each of its jobs knows it: the end of the lifelines.

A fiber program is its main process (the *master*: the one the user started) and the
jobs it starts, and theirs. Every job holds two lifelines (see
`fiber.process._bootstrap`), its anchor connections to two hubs:

- to its **parent**: when it drops, ``parent_process()`` turns dead (``is_alive()`` False,
  ``sentinel`` readable, ``join()`` returns), and the job goes on, as a child of
  ``multiprocessing`` goes on when its parent is terminated;
- to the **master**: when it drops (the program ended, was killed, or its host became
  unreachable), the job ends its own children and then itself. So a program's jobs all
  end with the program, whatever happened to the processes between them: no job
  outlives the program on a cluster.

A child of the master has one lifeline, both at once. The master's hub address travels
in each launch payload; in the master it is its own hub's.

fiber's own helper jobs, which serve their parent and nobody else (a pool's workers, the
object jobs of an ``AsyncManager``), end with their parent instead
(`end_with_parent`), as the standard library's pool workers and managed objects do.
"""

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


def end_with_parent(process: Any) -> None:
    """Make ``process`` (not started yet) end when this process ends: a helper job."""
    _helpers.add(process)


def lifeline_address(process: Any) -> str:
    """The hub whose end ends the job of ``process``: this process's for a helper job,
    else the master's."""
    if process in _helpers:
        return _runtime.hub().address
    return master_address()
