"""``fiber.futures.Executor``: the ``concurrent.futures`` API on a fiber pool.

How results reach futures, cancellation, and ``concurrent.futures.ProcessPoolExecutor``
on fiber: the API reference's page of this module."""

# The handing over of multiprocessing's descriptors: fiber.process._fd_handoff; a queue's
# _reader: fiber.queues._reader; the futures the interpreter waits for at exit: _PendingWork.

from __future__ import annotations

import collections
import concurrent.futures as cf
import itertools
import threading
import time
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Set,
    Tuple,
    TypeVar,
)

from ._process_state import here
from .pool import Pool
from .pool._pool import core_of
from .pool._poolcore import PoolCore
from .pool._results import ApplyResult
from .pool._state import Task
from .pool._worker import CALL

__all__ = ["Executor", "ProcessPoolExecutor"]

#: What a call returns: its Future's result (as typeshed types concurrent.futures').
_T = TypeVar("_T")


class _Future(cf.Future[Any]):
    """A Future whose ``cancel`` withdraws its task from the pool while it is queued, and
    whose ``result``/``exception`` read the worker's reply in the waiting thread.

    A withdrawn task never reaches a worker and gets no result, so ``cancel`` also does at
    once what the stdlib's executors do when they find a cancelled item in their queue:
    it calls ``set_running_or_notify_cancel``, which tells ``wait()`` and
    ``as_completed()`` (without it they would never count the future as done).
    """

    def __init__(self, core: PoolCore, on_done: Callable[[_Future], None]) -> None:
        """``on_done``: the executor's own bookkeeping once it is done, which never waits
        (run where it is settled: no thread hop for it, see `_invoke_callbacks`)."""
        super().__init__()
        self._core = core
        self._on_done = on_done
        self._tasks: List[Task] = []  # set by submit(), under the executor's lock
        self._source = _FutureResult(core, self)

    def submit(self, fn: Callable[..., object], args: Tuple[object, ...],
               kwargs: Dict[str, object]) -> None:
        """Queue the call on the pool (called once, under the executor's lock)."""
        self._tasks = self._core.submit(fn, CALL, [(0, (args, kwargs))], self._source,
                                        f"submit({getattr(fn, '__qualname__', fn)})")

    def cancel(self) -> bool:
        """Cancel the call unless a worker holds its task (then it is running: False).

        The task is withdrawn and the state changed under the future's lock, so that two
        threads cancelling at once agree, and no result can come for a withdrawn task.
        """
        with self._condition:
            if self._state == "PENDING" and not self._withdraw():
                self._state = "RUNNING"
            if self._state != "PENDING":
                return self.cancelled()  # True if an earlier cancel() did it
            self._state = "CANCELLED"
            self.set_running_or_notify_cancel()  # now CANCELLED_AND_NOTIFIED
            self._condition.notify_all()
        self._source.wake()  # a thread serving the hub in result() for it
        self._on_done(self)
        super()._invoke_callbacks()  # type: ignore[misc]  # here, as the stdlib's cancel()
        return True

    def _invoke_callbacks(self) -> None:
        """The done-callbacks of a result run on the pool's callback thread, in order, as
        the stdlib's run on its manager thread: never in a thread waiting in ``result()``,
        which may hold a lock a callback takes, and must keep to its timeout."""
        self._on_done(self)
        if not self._done_callbacks:  # type: ignore[attr-defined]  # the usual: no hop
            return
        callbacks = self._core.callbacks()
        if callbacks.is_current():
            super()._invoke_callbacks()  # type: ignore[misc]
        else:
            callbacks.submit(super()._invoke_callbacks)  # type: ignore[misc]

    def _withdraw(self) -> bool:
        """Take the task out of the pool's queue; False once a worker holds it, or if
        there is no task (its call could not be pickled: that failure is on its way)."""
        return bool(self._tasks) and self._core.cancel(self._tasks[0])

    def result(self, timeout: Optional[float] = None) -> Any:
        return super().result(self._source.wait_and_settle(timeout))

    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]:
        return super().exception(self._source.wait_and_settle(timeout))

    def mark_running(self) -> None:
        """PENDING → RUNNING: a worker holds the task, so it can no longer be cancelled.
        Unlike ``set_running_or_notify_cancel``, a future running already is no error."""
        with self._condition:
            if self._state == "PENDING":
                self._state = "RUNNING"


class _FutureResult(ApplyResult[Any]):
    """Delivers a pool result into a Future: in a thread waiting in ``result()`` (which
    serves the hub, so that the worker's reply wakes it alone), else on the pool's
    callback thread."""

    def __init__(self, core: PoolCore, future: _Future) -> None:
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
        except BaseException:  # KeyboardInterrupt: a reply it served goes on unsettled
            with self._hub.lock:
                self._waiting -= 1
                served = self._completed
            if served:  # its delivery skipped the callback thread for this thread
                self._callbacks().submit(self._settle)
            raise
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
        try:
            ok, value = self._outcome()
        except BaseException:  # a Ctrl-C while it was unpickled: settled later, elsewhere
            with self._settle_lock:
                self._settled = False
            self._callbacks().submit(self._settle)
            raise
        self._future.mark_running()
        if ok:
            self._future.set_result(value)
        else:
            self._future.set_exception(value)


def _run_chunk(fn: Callable[..., _T], chunk: List[Tuple[object, ...]]) -> List[_T]:
    return [fn(*args) for args in chunk]


class _PendingWork:
    """The executors with futures not done yet, which the interpreter waits for at exit.

    ``concurrent.futures`` documents that the interpreter does not exit until all pending
    futures are done, whatever ``shutdown(wait=...)`` said. As the stdlib, a hook
    registered with ``threading._register_atexit`` does it: it runs once the main thread
    has ended, before the ``atexit`` handlers, among them the pool's finalizer, which
    would terminate the workers. Holding the executors here also keeps one the program
    dropped (and its pool) alive until its work is done, as the stdlib's manager thread
    does.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executors: Set[Executor] = set()
        self._hooked = False
        self._exiting = False

    def add(self, executor: Executor) -> None:
        """Wait for ``executor`` at exit (called when it gets a first pending future).

        Raises:
            RuntimeError: the interpreter is exiting; work queued now might be dropped.
        """
        with self._lock:
            if self._exiting:
                raise RuntimeError("cannot schedule new futures after interpreter shutdown")
            if not self._hooked:
                threading._register_atexit(self._finish)  # type: ignore[attr-defined]  # noqa: SLF001 - as concurrent.futures
                here.after_fork_in_child(self._after_fork_in_child)
                self._hooked = True
            self._executors.add(executor)

    def discard(self, executor: Executor) -> None:
        """Forget ``executor``: it has no pending future left."""
        with self._lock:
            self._executors.discard(executor)

    def _after_fork_in_child(self) -> None:
        # A fork of the program (os.fork in user code) has copies of the executors, but
        # none of their threads and workers: no work of theirs to wait for at its exit.
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._executors = set()

    def _finish(self) -> None:
        with self._lock:
            self._exiting = True
            executors = list(self._executors)
        for executor in executors:
            executor.shutdown(wait=True)  # its cancel_futures, if any, took effect already


_PENDING = _PendingWork()


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
        if max_tasks_per_child is not None:  # (as the stdlib's, types and words)
            if type(max_tasks_per_child) is not int:
                raise TypeError("max_tasks_per_child must be an integer")
            if max_tasks_per_child <= 0:
                raise ValueError("max_tasks_per_child must be >= 1")
        self._pool = Pool(max_workers, initializer, initargs, max_tasks_per_child,
                          context=mp_context, **resources)
        self._core = core_of(self._pool)
        self._shutdown = False
        #: Held while a call is submitted, so that shutdown(cancel_futures=True) sees
        #: every future together with its task, as the stdlib's executors do.
        self._lock = threading.Lock()
        self._futures: Set[_Future] = set()  # not done yet
        #: Done futures `_forget` could not take out of ``_futures`` at once (see there).
        self._done: Deque[_Future] = collections.deque()

    def submit(self, fn: Callable[..., _T], /, *args: object, **kwargs: object
               ) -> cf.Future[_T]:
        """Schedule ``fn(*args, **kwargs)``; returns its Future.

        Raises:
            RuntimeError: the executor was shut down, or the interpreter is exiting.
        """
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._sweep()
            if not self._futures:
                _PENDING.add(self)
            future = _Future(self._core, self._forget)
            try:
                future.submit(fn, args, kwargs)
            except BaseException:
                if not self._futures:
                    _PENDING.discard(self)
                raise
            self._futures.add(future)
        return future

    def _forget(self, future: _Future) -> None:
        """A future is done. Never waits for ``_lock``: at interpreter exit a pool's
        callbacks may run in the thread delivering results, under the hub's lock, which
        a ``submit`` holding ``_lock`` waits for. The lock's holder takes it out then."""
        self._done.append(future)
        if self._lock.acquire(blocking=False):
            try:
                self._sweep()
            finally:
                self._lock.release()

    def _sweep(self) -> None:
        """Take the done futures out of ``_futures`` (under ``_lock``)."""
        if not self._done:
            return
        while self._done:
            self._futures.discard(self._done.popleft())
        if not self._futures:
            _PENDING.discard(self)

    def map(self, fn: Callable[..., _T], *iterables: Iterable[object],
            timeout: Optional[float] = None, chunksize: int = 1) -> Iterator[_T]:
        """Like ``concurrent.futures``: results in order, lazily; chunks of ``chunksize``.

        Raises:
            ValueError: ``chunksize`` < 1.
            TimeoutError: (while iterating) a result is not ready ``timeout`` seconds after
                the call.
        """
        if chunksize < 1:
            raise ValueError("chunksize must be >= 1.")
        if chunksize == 1:
            return super().map(fn, *iterables, timeout=timeout)
        args = zip(*iterables)
        chunks = iter(lambda: list(itertools.islice(args, chunksize)), [])
        results = super().map(_run_chunk, itertools.repeat(fn), chunks, timeout=timeout)
        return itertools.chain.from_iterable(results)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Accept no more calls; with ``cancel_futures``, cancel those no worker holds yet;
        with ``wait``, return once the others are done and the workers have exited.
        Without ``wait``, they still finish before the interpreter exits."""
        with self._lock:
            self._shutdown = True
            self._sweep()
            pending = list(self._futures)
        if cancel_futures:
            for future in pending:
                future.cancel()
        self._pool.close()
        if wait:
            self._pool.join()


ProcessPoolExecutor = Executor
