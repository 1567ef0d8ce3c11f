"""fiber.futures.Executor: the concurrent.futures API on a fiber pool."""

from __future__ import annotations

import concurrent.futures as cf
import time

import helpers
import pytest
from conftest import wait_until

import fiber
from fiber.errors import RemoteTraceback
from fiber.futures import Executor


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def test_submit_map_and_chunks(ctx):
    with Executor(2, mp_context=ctx) as ex:
        assert ex.submit(add, 2, b=3).result(60) == 5
        assert list(ex.map(square, range(10))) == [x * x for x in range(10)]
        assert list(ex.map(add, range(7), range(7), chunksize=3)) == [2 * x for x in range(7)]
        with cf.ProcessPoolExecutor(2) as ref:
            assert list(ref.map(square, range(10))) == list(ex.map(square, range(10)))


def test_future_fails_with_remote_traceback(ctx):
    with Executor(1, mp_context=ctx) as ex:
        f = ex.submit(helpers.raise_value_error, "bad input")
        with pytest.raises(ValueError, match="bad input") as err:
            f.result(60)
        assert isinstance(err.value.__cause__, RemoteTraceback)
        assert "raise_value_error" in str(err.value.__cause__)
        assert isinstance(f.exception(1), ValueError)


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


def test_bad_max_workers():
    with pytest.raises(ValueError):
        Executor(0)


def test_fiber_module_is_a_drop_in_for_pool_users():
    import fiber as multiprocessing

    with multiprocessing.Pool(2) as pool:
        assert pool.map(square, [1, 2, 3]) == [1, 4, 9]
    assert fiber.futures.ProcessPoolExecutor is Executor
