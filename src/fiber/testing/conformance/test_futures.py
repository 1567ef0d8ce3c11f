"""fiber.futures.Executor: the concurrent.futures API on a fiber pool."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import threading
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

import fiber
from fiber.errors import RemoteTraceback, WorkerLostError
from fiber.futures import Executor

from .support import helpers, pool_helpers
from .support.waiting import wait_until


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def _stdlib_executor(workers: int) -> cf.ProcessPoolExecutor:
    """The reference, with spawned workers: forking this multi-threaded test process (the
    hub's threads) can deadlock a child, and did, in CI."""
    return cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


def test_submit_map_and_chunks(ctx):
    with Executor(2, mp_context=ctx) as ex:
        assert ex.submit(add, 2, b=3).result(60) == 5
        assert list(ex.map(square, range(10))) == [x * x for x in range(10)]
        assert list(ex.map(add, range(7), range(7), chunksize=3)) == [2 * x for x in range(7)]
        with _stdlib_executor(2) as ref:
            assert list(ref.map(square, range(10))) == list(ex.map(square, range(10)))


def test_future_fails_with_remote_traceback(ctx):
    with Executor(1, mp_context=ctx) as ex:
        f = ex.submit(helpers.raise_value_error, "bad input")
        with pytest.raises(ValueError, match="bad input") as err:
            f.result(60)
        assert isinstance(err.value.__cause__, RemoteTraceback)
        assert "raise_value_error" in str(err.value.__cause__)
        assert isinstance(f.exception(1), ValueError)


def test_a_task_that_kills_its_worker_fails_with_what_the_stdlibs_raises(ctx):
    """As a ``ProcessPoolExecutor``'s future whose worker died: a ``BrokenProcessPool``
    (fiber's is a `WorkerLostError`, once ``pool_max_task_retries`` more tries died
    too). Unlike the stdlib's, the executor is not broken: it takes new work."""
    with _stdlib_executor(1) as ref:
        with pytest.raises(BrokenProcessPool):
            ref.submit(helpers.hard_exit, 3).result(60)
    with fiber.config.override(pool_max_task_retries=0), \
            Executor(1, mp_context=ctx) as ex:
        with pytest.raises(BrokenProcessPool) as info:
            ex.submit(helpers.hard_exit, 3).result(60)
        assert isinstance(info.value, WorkerLostError), repr(info.value)
        assert "exit code 3" in str(info.value), str(info.value)
        assert ex.submit(square, 7).result(60) == 49


def test_as_completed_and_wait(ctx):
    with Executor(2, mp_context=ctx) as ex:
        futures = [ex.submit(square, i) for i in range(8)]
        assert sorted(f.result() for f in cf.as_completed(futures, timeout=60)) == [
            i * i for i in range(8)]
        done, not_done = cf.wait(futures, timeout=60)
        assert len(done) == 8 and not not_done


def test_cancel_queued_futures_and_shutdown(ctx):
    ex = Executor(1, mp_context=ctx)
    first = ex.submit(time.sleep, 1.0)
    wait_until(lambda: first._tasks and not ex._pool._core.service.queue, 60,
               message="the first task handed to the worker")
    queued = [ex.submit(square, i) for i in range(20)]
    assert not first.cancel()  # a worker holds it: too late
    assert queued[-1].cancel() and queued[-1].cancelled()
    ex.shutdown(wait=True, cancel_futures=True)
    assert first.result(1) is None
    assert all(f.done() for f in queued)
    assert sum(f.cancelled() for f in queued) >= 15  # all but the prefetched few
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(square, 1)


def test_result_waits_in_its_thread_and_honours_its_timeout(ctx):
    """result() and exception() read the reply in the waiting thread (the pool's callback
    thread never settles such a future), give up at their timeout, and several threads
    may wait for one future; done callbacks run on the pool's callback thread."""
    with Executor(1, mp_context=ctx) as ex:
        ex.submit(square, 1).result(60)  # the worker connected
        callbacks = ex._pool._core.callbacks()
        seen = []
        f = ex.submit(pool_helpers.sleep_return, "v", 1.5)
        f.add_done_callback(lambda fut: seen.append(threading.current_thread()))
        t = time.monotonic()
        with pytest.raises(cf.TimeoutError):
            f.result(timeout=0.3)
        assert 0.25 < time.monotonic() - t < 1.2
        with pytest.raises(cf.TimeoutError):
            f.exception(timeout=0)
        got = []
        others = [threading.Thread(target=lambda: got.append(f.result(60))) for _ in range(2)]
        for other in others:
            other.start()
        assert f.result(60) == "v" and f.exception(0) is None
        for other in others:
            other.join(60)
        assert got == ["v", "v"]
        # set by a waiting thread; its callbacks run on the callback thread, as the
        # stdlib's on its manager thread
        wait_until(lambda: bool(seen), 60, message="the done-callback")
        assert seen[0] is callbacks._thread
        g = ex.submit(square, 3)  # nobody waits in result(): the callback thread settles it
        wait_until(g.done, 60, message="a future nobody waits for")
        assert g.result(0) == 9


def test_cancel_ends_a_wait_in_another_thread(ctx):
    with Executor(1, mp_context=ctx) as ex:
        busy = ex.submit(pool_helpers.sleep_return, None, 2.0)
        wait_until(lambda: not ex._pool._core.service.queue and busy._tasks, 60,
                   message="the first task handed to the worker")
        wait_until(lambda: ex._pool._core.service.workers and all(
            ws.pending for ws in ex._pool._core.service.workers.values()), 60)
        queued = [ex.submit(square, i) for i in range(5)]  # the last ones stay queued
        outcome = []

        def wait_for_it() -> None:
            try:
                queued[-1].result(60)
            except cf.CancelledError:
                outcome.append(time.monotonic())

        waiter = threading.Thread(target=wait_for_it)
        waiter.start()
        time.sleep(0.3)  # waiting (and serving the hub)
        t = time.monotonic()
        assert queued[-1].cancel()
        waiter.join(30)
        assert outcome and outcome[0] - t < 5  # not at its 60 s timeout


def _busy_then_queued(ex: cf.Executor, count: int) -> tuple:
    """A call a worker holds (it sleeps) and ``count`` calls queued behind it, the last
    ones surely queued still (a fiber worker holds a few tasks at most, a stdlib call
    queue max_workers + 1)."""
    busy = ex.submit(pool_helpers.sleep_return, "busy", 1.0)
    if isinstance(ex, Executor):  # its futures show a worker holds them only once asked
        service = ex._pool._core.service
        wait_until(lambda: busy._tasks and busy._tasks[0] not in service.queue, 60,
                   message="the first call handed to the worker")
    else:
        wait_until(busy.running, 60, message="the first call running")
    return busy, [ex.submit(square, i) for i in range(count)]


def test_a_cancelled_future_is_done_for_wait_and_as_completed(ctx):
    """wait() and as_completed() count a cancelled future as done, its done callbacks run
    once however often it is cancelled, from however many threads, and a running or
    finished one cannot be.

    The stdlib's ProcessPoolExecutor is not run alike here: its manager thread notifies a
    cancelled future only once it reaches it in its queue (cf.wait() returned it as not
    done after 60 s under load), and its shutdown() then hung on Python 3.11 to 3.13 (a
    race of the kind of CPython gh-94440)."""
    with Executor(1, mp_context=ctx) as ex:
        busy, queued = _busy_then_queued(ex, 10)
        last = queued[-1]
        calls = []
        last.add_done_callback(calls.append)
        assert not busy.cancel() and busy.running()
        cancellers = [threading.Thread(target=last.cancel) for _ in range(4)]
        for t in cancellers:
            t.start()
        for t in cancellers:
            t.join(30)
        assert last.cancel() and last.cancelled() and last.done()
        assert calls == [last]
        done, not_done = cf.wait([last], timeout=60)
        assert done == {last} and not not_done
        assert next(cf.as_completed([last], timeout=60)) is last
        with pytest.raises(cf.CancelledError):
            last.result(1)
        done, not_done = cf.wait([busy, *queued], timeout=60)
        assert not not_done
        assert busy.result(0) == "busy" and not busy.cancel()
        assert [f.result(0) for f in queued[:-1]] == [i * i for i in range(9)]
        assert calls == [last]


def test_futures_cancelled_by_shutdown_are_done_for_wait(ctx):
    ex = Executor(1, mp_context=ctx)
    busy, queued = _busy_then_queued(ex, 20)
    ex.shutdown(wait=False, cancel_futures=True)
    cancelled = [f for f in queued if f.cancelled()]
    assert len(cancelled) >= 15  # all but the few the worker holds
    done, not_done = cf.wait(cancelled, timeout=60)
    assert not not_done
    assert len(list(cf.as_completed(queued, timeout=60))) == 20
    assert busy.result(60) == "busy"
    ex.shutdown(wait=True)


