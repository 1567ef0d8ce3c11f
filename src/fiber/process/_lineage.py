"""The program's main process, as each of its jobs knows it: the end of the lifelines. A
job whose lifeline to the master drops ends its own children and then itself, so that no
job outlives the program on a cluster. The design: docs/contributing/processes.md,
"Lineage"."""

from __future__ import annotations

from .._core import _runtime
from .._process_state import here

__all__ = ["master_address", "set_master_address", "end_with_parent", "lifeline_address"]


def master_address() -> str:
    """The hub address of the program's main process (this process's own hub in it)."""
    return here.jobs.master_address or _runtime.hub().address


def set_master_address(address: str) -> None:
    """In a job, before anything is started: the master's hub address (from its payload)."""
    here.jobs.master_address = address


def end_with_parent(process: object) -> None:
    """Make ``process`` (not started yet) end when this process ends: a helper job."""
    here.jobs.helper_processes.add(process)


def lifeline_address(process: object) -> str:
    """The hub whose end ends the job of ``process``: this process's for a helper job,
    else the master's."""
    if process in here.jobs.helper_processes:
        return _runtime.hub().address
    return master_address()
