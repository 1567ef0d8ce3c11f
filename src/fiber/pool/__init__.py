"""``fiber.Pool``: the API of ``multiprocessing.Pool`` over job-backed workers.

Besides ``Pool`` and its result objects: ``RemoteTraceback``, ``MaybeEncodingError`` and
``TimeoutError`` (from ``fiber.errors``), where ``multiprocessing.pool`` has them;
``ThreadPool``, the standard library's (threads of this process: nothing of it is a job);
``ZPool`` and ``ResilientZPool``, the original fiber's names of the pool; and the pool
states ``INIT``, ``RUN``, ``CLOSE`` and ``TERMINATE``.
"""

# Inside: _pool: Pool, the API; _poolcore: its core (workers' life cycle, submission).
# _service: the scheduler on the master's hub (task queue, pending tables, recovery of a
# lost worker's tasks), with _dispatch (how it hands tasks out: least-loaded worker with
# credit, far workers topped up, late tasks copied). _results: AsyncResult, MapResult and
# the imap iterators.
# _worker: the loop a worker runs; _protocol: what master and workers say to each other on
# the wire. _status: Pool.status(); _losses: the lost-worker warnings. _api_extras:
# Pool._pool, start_workers, wait_until_workers_up; _zpool: ZPool and ResilientZPool.
# Jobs of several workers: _group (the job's process: forks and relays its workers, and
# _jobqueue: the tasks handed to the job as a whole, spread over them), _jobs (the
# service's side of them, a job's record of its tasks), _reconnect (workers and jobs whose
# connection was reset), _sizing (how many workers a job holds when the pool does not
# say). _renew, _retire, _late, _credit: renewals, retirement, late copies, credit.

from multiprocessing.pool import ThreadPool

from .._exports import publish
from ..errors import MaybeEncodingError, RemoteTraceback, TimeoutError
from ._api_extras import CLOSE, INIT, RUN, TERMINATE
from ._pool import Pool
from ._results import (
    ApplyResult,
    AsyncResult,
    IMapIterator,
    IMapUnorderedIterator,
    MapResult,
)
from ._zpool import ResilientZPool, ZPool

__all__ = ["Pool", "AsyncResult", "ApplyResult", "MapResult", "IMapIterator",
           "IMapUnorderedIterator", "RemoteTraceback", "MaybeEncodingError", "TimeoutError",
           "ThreadPool", "ZPool", "ResilientZPool", "INIT", "RUN", "CLOSE", "TERMINATE"]

publish(__name__, Pool, AsyncResult, ApplyResult, MapResult, IMapIterator, IMapUnorderedIterator,
        ZPool, ResilientZPool)
