"""fiber's interfaces in one place: every abstract base and every ``Protocol``.

Each is defined in the layer that uses it (a lower layer names, as a ``Protocol``, what
it needs of a higher one, rather than importing it) and gathered here, so that a
maintainer finds them all on one page: ``docs/contributing/interfaces.md``, which says
for each method when it is called and what it returns. `tests/unit/test_interfaces.py`
fails when an interface is defined elsewhere and not listed here.

Backends (what a backend author implements, from the most general to the most
specific): `Backend`, `CommandLineBackend`, `LabelledBackend`, `BatchBackend`,
`ArrayBackend`; and what a batch backend's job listing (`BatchCommands`) and Slurm's job
steps (`StepCommands`) need of it.

The transport: `Service` and `Dispatcher` (what a server serves), `Channel` (a
connection, or a call to this process's own server), `OwnServer` and `Servable` (what a
caller uses of its own server), `Settings` (timeouts and keepalives, read at each use).

Processes and pools: `Startable` (what starting a job needs of a process),
`ProcessContext` and `BackendContext` (what a pool and a manager need of their context),
`ResultSink` (where a task's result goes), `PoolLink` (a worker's link to its master).
"""

from __future__ import annotations

from .backends._arrays import ArrayBackend
from .backends._base import Backend
from .backends._batch import BatchBackend, BatchCommands
from .backends._cli_backend import CommandLineBackend
from .backends._labelled import LabelledBackend
from .backends.slurm._steps import StepCommands
from .pool._state import ResultSink
from .pool._worker import PoolLink
from .process._bound import BackendContext, ProcessContext
from .process._starting import Startable
from .transport.local import Channel, OwnServer
from .transport.operations import Dispatcher, Service
from .transport.serving import Servable
from .transport.settings import Settings

__all__ = [
    "Backend", "CommandLineBackend", "LabelledBackend", "BatchBackend", "ArrayBackend",
    "BatchCommands", "StepCommands",
    "Service", "Dispatcher", "Channel", "OwnServer", "Servable", "Settings",
    "Startable", "ProcessContext", "BackendContext", "ResultSink", "PoolLink",
]
