"""``fiber.Pool``: the API of ``multiprocessing.Pool`` over job-backed workers. Workers pull
work (each holds at most ``pool_prefetch + 1`` tasks); a maintainer thread starts them and
replaces the lost. The threads, drawn: docs/contributing/pools.md, "The Pool and its threads".
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Mapping,
    NoReturn,
    Optional,
    Sequence,
    Set,
    Tuple,
    Type,
    TypeVar,
)

from .._core import _inspect
from .._process_state import here
from ..backends import Resources
from ..config import get_config
from ..process import Process
from ..process._bound import ProcessContext
from ..process._limits import ensure_open_files
from ..process._starting import files_per_job, node_cpus
from ..transport.server import Serving
from . import _sizing
from ._api_extras import PoolExtras, check_error_handling
from ._poolcore import RUN, PoolCore, check_size, label, terminate_collected
from ._results import (
    ApplyResult,
    AsyncResult,
    IMapIterator,
    IMapUnorderedIterator,
    MapResult,
)
from ._status import PoolStatus, new_tally, rows, snapshot, status_dict, tally
from ._worker import CALL, MAP, STARMAP

__all__ = ["Pool", "AsyncResult", "ApplyResult", "MapResult", "IMapIterator",
           "IMapUnorderedIterator"]

#: An item of a map's input, and what its function returns (as typeshed types
#: multiprocessing's Pool: the program's type checker sees ``map``'s list of results).
_S = TypeVar("_S")
_T = TypeVar("_T")


class Pool(PoolExtras):
    """A pool of job-backed worker processes with the API of ``multiprocessing.Pool``.

    ``processes=None`` means ``pool_processes`` from the config, or ``cpu_count()``.
    ``cpu``, ``memory`` (MB) and ``gpu`` are what each worker asks the cluster for.
    ``workers_per_job`` (``pool_workers_per_job`` from the config): the workers a
    cluster job holds, forked by it, asking for their resources together (a pool of N
    workers is ``ceil(N / workers_per_job)`` jobs); 0, the default, lets the pool choose
    (a job a worker below 64 workers or where the node size is unknown, else as many as
    fit a node: see the pool page).
    A dead worker's tasks always go to the others. ``error_handling=True`` (the original
    fiber's) also runs again a task that raised, up to ``pool_max_task_retries`` times,
    before its exception is its result (for idempotent tasks: the original ran such a
    task again, its exception having ended the worker); by default a task's exception is
    its result at once, as with ``multiprocessing``.

    Raises:
        ValueError: ``processes`` < 1, a bad ``maxtasksperchild`` or
            ``workers_per_job``.
        TypeError: ``processes`` is not an int, ``initializer`` is not callable, or
            ``error_handling`` is not a bool.
        ResourceLimitError: the workers would need more open files than this process
            may have (its soft limit is raised to the hard one first).
    """

    _core: PoolCore

    def __init__(self, processes: Optional[int] = None,
                 initializer: Optional[Callable[..., object]] = None,
                 initargs: Iterable[object] = (), maxtasksperchild: Optional[int] = None,
                 context: Optional[ProcessContext] = None, *, cpu: Optional[float] = None,
                 memory: Optional[int] = None, gpu: Optional[int] = None,
                 error_handling: Optional[bool] = None,
                 workers_per_job: Optional[int] = None) -> None:
        check_error_handling(error_handling)
        if workers_per_job is None:
            workers_per_job = get_config().pool_workers_per_job
        if (not isinstance(workers_per_job, int) or isinstance(workers_per_job, bool)
                or workers_per_job < 0):
            raise ValueError(f"workers_per_job must be an int of at least 1, or 0 (chosen "
                             f"by the pool), got {workers_per_job!r}")
        if processes is None:
            processes = get_config().pool_processes or os.cpu_count() or 1
        check_size(processes)
        if initializer is not None and not callable(initializer):
            raise TypeError("initializer must be a callable")
        if maxtasksperchild is not None and (
                not isinstance(maxtasksperchild, int) or maxtasksperchild <= 0):
            raise ValueError("maxtasksperchild must be a positive int or None")
        process_class = Process if context is None else getattr(context, "Process", None)
        if not (isinstance(process_class, type) and issubclass(process_class, Process)):
            raise TypeError(f"context must be a fiber context (fiber.get_context()), not "
                            f"{context!r}: its processes would not be fiber jobs")
        resources = Resources(cpu=cpu, memory_mb=memory, gpu=gpu)
        workers_per_job = _sizing.workers_per_job(
            workers_per_job, processes, resources, lambda: node_cpus(process_class))
        # a job of several relays its workers: the master holds a job's descriptors
        ensure_open_files(-(-processes // workers_per_job), f"a pool of {processes} workers",
                          files_per_job(process_class))
        self._core = PoolCore(processes, process_class, initializer, tuple(initargs),
                               maxtasksperchild, resources, workers_per_job)
        self._core.service.retry_raised = bool(error_handling)
        self._finalizer = weakref.finalize(self, terminate_collected, self._core)
        # what fiber top and the dashboard call it: "Pool-1", numbered in this process
        name = f"Pool-{next(here.api.pool_numbers)}"
        core = self._core
        # /metrics' histograms: from the first look of a dashboard (its page, a scrape)
        # or of fiber top, dashboard in the config or not: a program nobody looks at
        # pays nothing for them (measured: ~1% of a Pool(1024)'s rounds of 1 ms tasks,
        # benchmarks/dashboard_cost.py), and a Prometheus takes its first scrape as the
        # start of its counts anyway

        def describe(pool: Pool) -> Dict[str, Any]:
            # A viewer's table is built in slices, the hub's lock and the GIL let go
            # between them (see _inspect.pause): the hub waits for a slice at most. Every
            # worker is counted; only the rows the viewer shows are built (all for fiber
            # top, a page for the dashboard's page, none for /metrics).
            lock, service = core.hub.lock, core.service
            shown = _inspect.rows_wanted()
            with lock:
                states = [ws for ws in service.workers.values() if not ws.lost]
                bars = list(service.stream.bars)
            counts = new_tally()
            for start in range(0, len(states), 4 * _inspect.SLICE):  # 4: a count is cheap
                _inspect.pause()
                with lock:
                    tally(states[start:start + 4 * _inspect.SLICE], counts)
            first = 0
            names: Optional[Set[str]] = None  # the stream's workers: all, or the page's
            if shown is not None:
                first = min(max(0, shown[0]), len(states))
                states = states[first:first + max(0, shown[1])]
                names = {ws.name for ws in states}
            workers: List[Dict[str, Any]] = []
            for start in range(0, len(states), _inspect.SLICE):
                _inspect.pause()
                with lock:
                    workers += rows(states[start:start + _inspect.SLICE], time.monotonic())
            _inspect.pause()
            stream = service.stream.recent(time.monotonic(), bars, names)
            with lock:
                waits, runs = service.latency.take(), service.durations.take()
            waits_binned = service.latency.binned(waits)  # outside the lock (see take)
            runs_binned = service.durations.binned(runs)
            with lock:
                service.latency.merge(waits_binned)
                service.durations.merge(runs_binned)
                out = {"name": name, **status_dict(service, core.state, core.size, workers,
                                                   counts["running"])}
                out.update(counts, workers_from=first)
                service.measuring = True  # from now on (see above)
                out["stream"] = stream
                out["durations"] = service.durations.as_dict()
                out["latency"] = service.latency.as_dict()
                out["bytes_sent"], out["bytes_received"] = service.traffic()
            return out

        _inspect.add_source("pools", self, describe)

    @property
    def _processes(self) -> int:
        return self._core.size

    # -- apply -------------------------------------------------------------------------

    def apply(self, func: Callable[..., _T], args: Iterable[object] = (),
              kwds: Optional[Mapping[str, object]] = None) -> _T:
        """Call ``func(*args, **kwds)`` in a worker and return its result."""
        # Queued while this thread serves the hub: a result quicker than our way from the
        # submission to get() still wakes this thread, not the hub thread.
        serving = self._core.hub.serving()
        try:
            return self._apply_async(func, args, kwds, None, None, serving).get()
        finally:
            serving.stop()

    def apply_async(self, func: Callable[..., _T], args: Iterable[object] = (),
                    kwds: Optional[Mapping[str, object]] = None,
                    callback: Optional[Callable[[_T], object]] = None,
                    error_callback: Optional[Callable[[BaseException], object]] = None
                    ) -> ApplyResult[_T]:
        """Submit one call; the result's ``get()`` returns its value or re-raises.

        Raises:
            ValueError: the pool was closed or terminated.
        """
        return self._apply_async(func, args, kwds, callback, error_callback)

    def _apply_async(self, func: Callable[..., _T], args: Iterable[object],
                     kwds: Optional[Mapping[str, object]],
                     callback: Optional[Callable[[_T], object]],
                     error_callback: Optional[Callable[[BaseException], object]],
                     serving: Optional[Serving] = None) -> ApplyResult[_T]:
        core = self._core
        core.check_running()
        # as multiprocessing: a result keeps its pool from collection
        result: ApplyResult[_T] = ApplyResult(core.callbacks, callback, error_callback,
                                              core.hub, core.service.spin_budget, owner=self)
        core.submit(func, CALL, [(0, (tuple(args), dict(kwds or {})))], result,
                    f"apply({label(func)})", serving)
        return result

    # -- map -----------------------------------------------------------------------------

    def _chunks(self, iterable: Iterable[object], chunksize: Optional[int]
                ) -> Tuple[List[Sequence[object]], int]:
        items = list(iterable)
        if chunksize is None:
            chunksize, extra = divmod(len(items), self._core.size * 4)
            if extra or not items:
                chunksize += 1
        if chunksize < 1:
            raise ValueError(f"Chunksize must be 1+, not {chunksize:n}")
        if chunksize == 1:  # the usual map of quick tasks: a tuple a task, no slicing
            # (a tuple of untracked items leaves the collector's lists; 10,000 lists of one
            # item, alive while they are pickled, brought its full collection closer)
            return [(item,) for item in items], len(items)
        return [items[i:i + chunksize] for i in range(0, len(items), chunksize)], len(items)

    def _map_async(self, func: Callable[..., _T], iterable: Iterable[object],
                   chunksize: Optional[int], mode: int,
                   callback: Optional[Callable[[List[_T]], object]],
                   error_callback: Optional[Callable[[BaseException], object]],
                   wait: bool = False) -> MapResult[_T]:
        """The MapResult; with ``wait``, once it is ready (waited for serving the hub)."""
        core = self._core
        core.check_running()
        chunks, length = self._chunks(iterable, chunksize)
        result: MapResult[_T] = MapResult(
            core.callbacks, len(chunks), length, callback, error_callback, core.hub,
            core.service.spin_budget, owner=self, chunksize=len(chunks[0]) if chunks else 0)
        # A short map waited for at once is queued while this thread serves the hub (see
        # apply); a long one is not: results must be taken in while the rest is pickled.
        serving = core.hub.serving() if wait and len(chunks) <= core.window else None
        try:
            core.submit(func, mode, enumerate(chunks), result, f"map({label(func)})",
                        serving, chunksize=len(chunks[0]) if chunks else 1)
            if wait:
                result.wait()
            return result
        finally:
            if serving is not None:
                serving.stop()

    def map(self, func: Callable[[_S], _T], iterable: Iterable[_S],
            chunksize: Optional[int] = None) -> List[_T]:
        """``[func(x) for x in iterable]`` computed by the workers, in order.

        Waits for every result (see `map_async` for ``chunksize``).

        Raises:
            ValueError: the pool was closed or terminated, or ``chunksize`` < 1.
            fiber.errors.BrokenPoolError: the pool's workers keep failing to start.
            Exception: the first exception a call raised, re-raised with its remote
                traceback as ``__cause__``.
        """
        values: List[_T] = self._map_async(func, iterable, chunksize, MAP, None, None,
                                          wait=True).get()
        return values

    def map_async(self, func: Callable[[_S], _T], iterable: Iterable[_S],
                  chunksize: Optional[int] = None,
                  callback: Optional[Callable[[List[_T]], object]] = None,
                  error_callback: Optional[Callable[[BaseException], object]] = None
                  ) -> MapResult[_T]:
        """Submit ``func(x)`` for each item of ``iterable``; returns a `MapResult` at once.

        ``iterable`` is consumed now and cut into chunks of ``chunksize`` items (None: about
        four chunks per worker). ``callback`` gets the list of results, ``error_callback``
        the first exception, on the pool's callback thread, before the result is ready.
        The result's ``completed`` and ``total`` tell the progress (a fiber extension).

        Raises:
            ValueError: the pool was closed or terminated, or ``chunksize`` < 1.
            fiber.errors.BrokenPoolError: the pool's workers keep failing to start.
        """
        return self._map_async(func, iterable, chunksize, MAP, callback, error_callback)

    def starmap(self, func: Callable[..., _T], iterable: Iterable[Iterable[object]],
                chunksize: Optional[int] = None) -> List[_T]:
        """``[func(*args) for args in iterable]`` computed by the workers, in order.

        Waits for every result (see `map_async` for ``chunksize``).

        Raises:
            ValueError: the pool was closed or terminated, or ``chunksize`` < 1.
            fiber.errors.BrokenPoolError: the pool's workers keep failing to start.
            Exception: the first exception a call raised, re-raised with its remote
                traceback as ``__cause__``.
        """
        values: List[_T] = self._map_async(func, iterable, chunksize, STARMAP, None, None,
                                          wait=True).get()
        return values

    def starmap_async(self, func: Callable[..., _T], iterable: Iterable[Iterable[object]],
                      chunksize: Optional[int] = None,
                      callback: Optional[Callable[[List[_T]], object]] = None,
                      error_callback: Optional[Callable[[BaseException], object]] = None
                      ) -> MapResult[_T]:
        """As `map_async`, with ``func(*args)`` for each ``args`` of ``iterable``.

        Raises:
            ValueError: the pool was closed or terminated, or ``chunksize`` < 1.
            fiber.errors.BrokenPoolError: the pool's workers keep failing to start.
        """
        return self._map_async(func, iterable, chunksize, STARMAP, callback, error_callback)

    def _imap(self, cls: Type[IMapIterator[_T]], func: Callable[[_S], _T],
              iterable: Iterable[_S], chunksize: int) -> IMapIterator[_T]:
        core = self._core
        core.check_running()
        if chunksize < 1:
            raise ValueError(f"Chunksize must be 1+, not {chunksize:n}")
        source = iter(iterable)
        chunks: Iterator[List[_S]] = iter(
            lambda: list(itertools.islice(source, chunksize)), [])
        holder: List[IMapIterator[_T]] = []

        def submit(index: int, chunk: Sequence[object]) -> None:
            core.submit(func, MAP, [(index, chunk)], holder[0], f"imap({label(func)})",
                        chunksize=chunksize, accepted=True)  # (taken before any close())

        holder.append(cls.__new__(cls))
        cls.__init__(holder[0], submit, chunks, core.imap_window, core.hub,
                     core.service.spin_budget, owner=self)
        with core.hub.lock:  # known to a close() from now on (fed to its end, see
            core.check_running()  # `_draining`), or refused if one came first
            core.imaps.add(holder[0])
        holder[0].top_up()  # (its first window: outside the lock, it reads the input)
        return holder[0]

    def imap(self, func: Callable[[_S], _T], iterable: Iterable[_S],
             chunksize: int = 1) -> IMapIterator[_T]:
        """Like ``map`` but lazy: consumes ``iterable`` as results are taken, in order."""
        return self._imap(IMapIterator, func, iterable, chunksize)

    def imap_unordered(self, func: Callable[[_S], _T], iterable: Iterable[_S],
                       chunksize: int = 1) -> IMapIterator[_T]:
        """Like ``imap`` but yields results as they complete."""
        return self._imap(IMapUnorderedIterator, func, iterable, chunksize)

    # -- life cycle ----------------------------------------------------------------------

    def resize(self, processes: int) -> None:
        """Grow or shrink the running pool; retiring workers finish the tasks they hold.

        Raises:
            TypeError: ``processes`` is not an int.
            ValueError: ``processes`` < 1, or the pool is not running.
            ResourceLimitError: growing it would exceed the open-file limit.
        """
        self._core.resize(processes)

    def close(self) -> None:
        """Accept no more tasks; workers exit once all submitted work is done."""
        self._core.close()

    def terminate(self) -> None:
        """End every worker now; unfinished results fail with PoolTerminatedError."""
        if self._finalizer.detach() is not None:
            self._core.terminate()

    def join(self) -> None:
        """Wait for the workers to exit (after ``close`` or ``terminate``).

        Raises:
            ValueError: the pool is still running.
        """
        if self._core.state == RUN:
            raise ValueError("Pool is still running")
        self._core.join()

    def status(self) -> PoolStatus:
        """A snapshot of the pool: each worker (name, job id, host, state, the task it
        runs and for how long, tasks done, restarts) and the tasks pending, running,
        done, failed and retried, with the tasks completed per second (fiber extension;
        ``fiber top`` shows the same for a running program). See `PoolStatus`."""
        core = self._core
        with core.hub.lock:
            return snapshot(core.service, core.state, core.size)

    def __enter__(self) -> Pool:
        self._core.check_running()
        return self

    def __exit__(self, *exc: object) -> None:
        self.terminate()

    def __reduce__(self) -> NoReturn:
        raise NotImplementedError(
            "pool objects cannot be passed between processes or pickled")

    def __repr__(self) -> str:
        cls = type(self)  # as multiprocessing's <multiprocessing.pool.Pool state=RUN pool_size=4>
        return (f"<{cls.__module__}.{cls.__qualname__} state={self._core.state} "
                f"pool_size={self._core.size}>")


def core_of(pool: Pool) -> PoolCore:
    """The core of ``pool``: what ``fiber.futures`` submits its calls to and cancels them
    from, and tests inspect (its workers)."""
    return pool._core  # noqa: SLF001 - this module's class
