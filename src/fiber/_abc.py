"""fiber's interfaces in one place: every abstract base and every ``Protocol``.

Each is defined in the layer that uses it (a lower layer names, as a ``Protocol``, what
it needs of a higher one, rather than importing it) and gathered here, so that a
maintainer finds them all on one page: ``docs/contributing/interfaces.md``, which says
for each method when it is called and what it returns. `tests/unit/test_interfaces.py`
fails when an interface is defined elsewhere and not listed here.

They come in three groups: the backend layer's, the transport's, and the seams between
processes, pools and contexts.
"""

from __future__ import annotations

from .backends._arrays import ArrayBackend, BatchSettings
from .backends._base import Backend
from .backends._batch import BatchBackend, BatchCommands
from .backends._cli_backend import CommandLineBackend
from .backends._labelled import LabelledBackend
from .pool._credit import Linked
from .pool._draining import Feeding
from .pool._losses import Placed
from .pool._state import ResultSink
from .pool._worker import PoolLink
from .process._bound import BackendContext, ProcessContext
from .process._starting import Startable
from .transport.local import Channel, OwnServer
from .transport.operations import Dispatcher, Record, Service
from .transport.serving import Servable
from .transport.settings import Settings

__all__ = [
    "Backend", "CommandLineBackend", "LabelledBackend", "BatchBackend", "ArrayBackend",
    "BatchCommands", "BatchSettings",
    "Service", "Dispatcher", "Record", "Channel", "OwnServer", "Servable", "Settings",
    "Startable", "ProcessContext", "BackendContext", "ResultSink", "PoolLink", "Linked",
    "Placed", "Feeding",
]
