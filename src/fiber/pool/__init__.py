"""``fiber.Pool``: the API of ``multiprocessing.Pool`` over job-backed workers.

- :mod:`._pool`: :class:`Pool` and its core (workers' life cycle, submission).
- :mod:`._service`: the scheduler on the master's hub (task queue, credit, pending
  tables, recovery of a lost worker's tasks).
- :mod:`._results`: ``AsyncResult``, ``MapResult`` and the ``imap`` iterators.
- :mod:`._worker`: the loop a worker runs; :mod:`._protocol`: what master and workers
  say to each other on the wire.
"""

from .._exports import publish
from ._pool import Pool
from ._results import (
    ApplyResult,
    AsyncResult,
    IMapIterator,
    IMapUnorderedIterator,
    MapResult,
)

__all__ = ["Pool", "AsyncResult", "ApplyResult", "MapResult", "IMapIterator",
           "IMapUnorderedIterator"]

publish(__name__, Pool, AsyncResult, ApplyResult, MapResult, IMapIterator, IMapUnorderedIterator)
