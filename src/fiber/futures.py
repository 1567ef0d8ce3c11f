"""``fiber.futures.Executor``: the ``concurrent.futures`` API on a fiber pool.

::

    Executor.submit(fn, *args) ──▶ Pool task (see fiber.pool) ──▶ Future
    result from a worker ──▶ the thread in future.result()/exception(), which serves the
        hub meanwhile (as a pool's get() does) ──▶ future.set_result / set_exception
      or, with nobody waiting so (done callbacks, wait(), as_completed()), the pool's
        callback thread ──▶ future.set_result / set_exception

Futures fail with the worker's exception, its remote traceback as ``__cause__``. A future
can be cancelled until a worker has been handed its task; a task handed out is "running"
as far as the executor can tell (``running()`` is True for it).

Why not ``concurrent.futures.ProcessPoolExecutor(mp_context=fiber.get_context())``: that
class builds its call queue from ``multiprocessing.queues.Queue``, whose OS pipes and
semaphores can only reach a child by file-descriptor inheritance during
``multiprocessing``'s own spawning (``assert_spawning``), and it waits on the pipe's file
descriptor. No job on another host can share those; this executor keeps the API.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import threading
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional

from ._pool_results import ApplyResult
from ._pool_service import Task
from ._pool_worker import CALL
from .pool import Pool

__all__ = ["Executor", "ProcessPoolExecutor"]


class _Future(cf.Future):
    """A Future whose ``cancel`` withdraws its task from the pool while it is queued, and
    whose ``result``/``exception`` read the worker's reply in the waiting thread."""

    _tasks: List[Task]
    _executor: Executor
    _source: _FutureResult

    def cancel(self) -> bool:
        with self._condition:  # type: ignore[attr-defined]
            if self._state in ("FINISHED",):  # type: ignore[attr-defined]
                return False
        if self._tasks and not self._executor._pool._core.cancel(self._tasks[0]):
            self.set_running_or_notify_cancel_quietly()
            return False
        cancelled = super().cancel()
        if cancelled:
            self._source.wake()  # a thread serving in result() for it
        return cancelled

    def result(self, timeout: Optional[float] = None) -> Any:
        return super().result(self._source.wait_and_settle(timeout))

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        return super().exception(self._source.wait_and_settle(timeout))

    def set_running_or_notify_cancel_quietly(self) -> None:
        with self._condition:  # type: ignore[attr-defined]
            if self._state == "PENDING":  # type: ignore[attr-defined]
                self._state = "RUNNING"  # type: ignore[attr-defined]


class _FutureResult(ApplyResult):
    """Delivers a pool result into a Future: in a thread waiting in ``result()`` (which
    serves the hub, so that the worker's reply wakes it alone), else on the pool's
    callback thread."""

    def __init__(self, pool: Pool, future: _Future) -> None:
        core = pool._core
        super().__init__(core.callbacks, server=core.hub, spin=core.service.spin_budget)
        self._future = future
        self._hub = core.hub
        self._waiting = 0  # threads in wait_and_settle(); under the hub lock, as deliveries
        self._settle_lock = threading.Lock()
        self._settled = False

    def _complete(self) -> None:  # under the hub's lock
        super()._complete()  # sets the flag a waiting thread waits for
        if not self._waiting:
            self._callbacks().submit(self._settle)

    def wake(self) -> None:
        """End a wait for a future that will get no result (it was cancelled)."""
        self._event.set()

    def wait_and_settle(self, timeout: Optional[float]) -> Optional[float]:
        """Wait for the reply serving the hub, and settle the future with it; the time
        left of ``timeout``."""
        if self._future.done():
            return timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._hub.lock:
            self._waiting += 1
        try:
            self._event.wait_serving(timeout)
        finally:
            with self._hub.lock:
                self._waiting -= 1
        self._settle()
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _settle(self) -> None:
        """Put the outcome into the future, once, if it has come."""
        with self._settle_lock:
            if self._settled or not self._completed or self._future.cancelled():
                return
            self._settled = True
        ok, value = self._outcome()
        self._future.set_running_or_notify_cancel_quietly()
        if ok:
            self._future.set_result(value)
        else:
            self._future.set_exception(value)


def _run_chunk(fn: Callable[..., Any], chunk: List[Any]) -> List[Any]:
    return [fn(*args) for args in chunk]


class Executor(cf.Executor):
    """A ``concurrent.futures`` executor whose workers are fiber jobs.

    Arguments are those of ``ProcessPoolExecutor`` (``max_workers``, ``mp_context`` — a
    fiber context —, ``initializer``, ``initargs``, ``max_tasks_per_child``) plus the
    pool's ``cpu``, ``memory`` and ``gpu`` per worker.
    """

    def __init__(self, max_workers: Optional[int] = None, mp_context: Any = None,
                 initializer: Optional[Callable[..., Any]] = None, initargs: Iterable[Any] = (),
                 *, max_tasks_per_child: Optional[int] = None, **resources: Any) -> None:
        if max_workers is not None and max_workers <= 0:
            raise ValueError("max_workers must be greater than 0")
        self._pool = Pool(max_workers, initializer, initargs, max_tasks_per_child,
                          context=mp_context, **resources)
        self._shutdown = False
        self._lock = threading.Lock()
        self._futures: set[_Future] = set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> cf.Future:
        """Schedule ``fn(*args, **kwargs)``; returns its Future.

        Raises:
            RuntimeError: the executor was shut down.
        """
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            future = _Future()
            future._executor = self
            future._tasks = []
            self._futures.add(future)
        future.add_done_callback(self._forget)
        result = future._source = _FutureResult(self._pool, future)
        future._tasks = self._pool._core.submit(fn, CALL, [(0, (args, kwargs))], result,
                                                f"submit({getattr(fn, '__qualname__', fn)})")
        return future

    def _forget(self, future: cf.Future) -> None:
        with self._lock:
            self._futures.discard(future)  # type: ignore[arg-type]

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any],
            timeout: Optional[float] = None, chunksize: int = 1) -> Iterator[Any]:
        """Like ``concurrent.futures``: results in order, lazily; chunks of ``chunksize``."""
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if chunksize == 1:
            return super().map(fn, *iterables, timeout=timeout)
        args = zip(*iterables)
        chunks = iter(lambda: list(itertools.islice(args, chunksize)), [])
        results = super().map(_run_chunk, itertools.repeat(fn), chunks, timeout=timeout)
        return itertools.chain.from_iterable(results)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            pending = list(self._futures)
        if cancel_futures:
            for future in pending:
                future.cancel()
        self._pool.close()
        if wait:
            self._pool.join()


ProcessPoolExecutor = Executor
