"""``fiber.pool`` as programs written for multiprocessing and for the original fiber use it
(issue 16): ``RemoteTraceback``/``MaybeEncodingError`` where ``multiprocessing.pool`` has
them, an unpicklable result raising ``MaybeEncodingError``, ``Pool._pool``, and the
original fiber's ``error_handling=``, ``start_workers``, ``wait_until_workers_up``,
``ZPool``/``ResilientZPool``."""

from __future__ import annotations

import functools
import multiprocessing.pool as mp_pool

import psutil
import pytest

import fiber
import fiber.pool
from fiber.errors import BrokenPoolError
from fiber.testing.conformance.support import dropin_helpers as dh
from fiber.testing.conformance.support import pool_helpers as ph
from fiber.testing.conformance.support.waiting import wait_until

pytestmark = pytest.mark.timeout(180)


def test_the_names_of_multiprocessing_pool():
    assert fiber.pool.MaybeEncodingError is mp_pool.MaybeEncodingError
    assert issubclass(fiber.pool.RemoteTraceback, mp_pool.RemoteTraceback)
    assert fiber.pool.ThreadPool is mp_pool.ThreadPool  # threads of this process
    assert issubclass(fiber.pool.TimeoutError, mp_pool.TimeoutError)
    with fiber.pool.ThreadPool(2) as tp:
        assert tp.map(dh.triple, [1, 2]) == [3, 6]


def test_a_task_error_has_the_remote_traceback_multiprocessing_code_looks_for(ctx):
    with ctx.Pool(1) as pool:
        with pytest.raises(ValueError) as info:
            pool.apply(ph.raise_value_error, ("boom",))
    cause = info.value.__cause__
    assert isinstance(cause, mp_pool.RemoteTraceback) and "boom" in cause.tb


def test_an_unpicklable_result_raises_maybe_encoding_error(ctx):
    reference = mp_pool.MaybeEncodingError(TypeError("x"), 1)  # the stdlib's message
    assert str(reference) == "Error sending result: '1'. Reason: 'TypeError('x')'"
    with ctx.Pool(1) as pool:
        outcomes = []
        for get in (lambda: pool.apply_async(dh.unpicklable_result, (1,)).get(60),
                    lambda: pool.map(dh.unpicklable_result, [1, 2], chunksize=2),
                    lambda: next(pool.imap(dh.unpicklable_result, [1]))):
            with pytest.raises(fiber.pool.MaybeEncodingError) as info:
                get()
            outcomes.append(info.value)
        assert pool.apply(dh.triple, (5,)) == 15  # the pool goes on
    for e in outcomes:
        assert str(e).startswith("Error sending result: '") and "Reason: '" in str(e)
        assert "_thread.lock" in e.value  # the stdlib's attributes: reprs of both
        assert "TypeError" in e.exc and "pickle" in e.exc and "result" in e.exc
        assert isinstance(e.__cause__, mp_pool.RemoteTraceback)
    assert e.value.startswith("[")  # a map's chunk: the list of its results, as the stdlib


def test_a_running_pool_collected_says_so_in_a_resource_warning(ctx):
    """As multiprocessing.Pool's ``__del__``: the same words (a filter written for them
    applies), and the pool is terminated; a pool closed first says nothing."""
    import gc
    import warnings

    for closed in (False, True):
        pool = ctx.Pool(1)
        assert pool.apply(ph.square, (3,)) == 9
        pids = [p.pid for p in pool._pool]
        if closed:
            pool.close()
            pool.join()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            del pool
            gc.collect()
        said = [str(w.message) for w in caught if w.category is ResourceWarning]
        if closed:
            assert said == []
        else:
            assert len(said) == 1 and said[0].startswith(
                "unclosed running multiprocessing pool"), said
        wait_until(lambda pids=pids: not any(map(psutil.pid_exists, pids)), 30)


def test_a_worker_the_pool_replaced_can_still_be_joined(ctx):
    """A program that joins what `active_children` listed may hold a pool worker that
    ended and was replaced meanwhile: its join returns, with its exit code, as a
    multiprocessing.Pool's worker's does (a CI run once got "process object is closed")."""
    import os
    import signal

    with ctx.Pool(1) as pool:
        assert pool.apply(ph.square, (2,)) == 4
        worker = pool._pool[0]
        assert worker in fiber.active_children()
        os.kill(worker.pid, signal.SIGKILL)
        wait_until(lambda: [p.pid for p in pool._pool] not in ([], [worker.pid]), 30)
        assert pool.apply(ph.square, (3,)) == 9  # its replacement
        worker.join(5)
        assert worker.exitcode == -signal.SIGKILL and not worker.is_alive()
        assert worker not in fiber.active_children()


def test_pool_underscore_pool_lists_the_workers_read_only(ctx):
    with ctx.Pool(3) as pool:
        workers = pool._pool
        assert len(workers) == 3 and all(isinstance(p, fiber.Process) for p in workers)
        workers.clear()  # a copy: the pool is not changed
        assert len(pool._pool) == 3
        with pytest.raises(AttributeError):
            pool._pool = []
        pool.resize(2)
        assert pool.map(dh.triple, range(4)) == [0, 3, 6, 9]
        assert pool._state == fiber.pool.RUN == mp_pool.RUN
        pool.close()
        assert pool._state == mp_pool.CLOSE
        with pytest.raises(AttributeError):
            pool._state = mp_pool.RUN
        pool.join()


@pytest.mark.parametrize("make", ["fiber.Pool", "ctx.Pool", "ZPool", "ResilientZPool"])
def test_the_original_fibers_pool_api(ctx, make):
    factory = {"fiber.Pool": fiber.Pool, "ctx.Pool": ctx.Pool, "ZPool": fiber.pool.ZPool,
               "ResilientZPool": fiber.pool.ResilientZPool}[make]
    if make in ("ZPool", "ResilientZPool"):
        factory = functools.partial(factory, context=ctx)
    pool = factory(2, error_handling=True)
    try:
        pool.start_workers()
        pool.wait_until_workers_up(timeout=120)
        assert len(pool._pool) == 2 and all(p.is_alive() for p in pool._pool)
        flag = ctx.Value("i", 0)
        # a worker dies in the middle of the map: its tasks go to the other (error handling)
        assert pool.map(functools.partial(dh.exit_once_on, bad=5, flag=flag), range(20),
                        chunksize=1) == list(range(20))
        assert flag.value == 1
    finally:
        pool.terminate()
        pool.join()


def test_error_handling_runs_again_a_task_that_raised(ctx):
    """The original's ``Pool(error_handling=True)`` ("failed tasks will be resubmitted",
    its test_pool.py's test_error_handling): a task that raised runs again, up to
    ``pool_max_task_retries`` times, then its exception is its result; by default it is
    the result at once, as with multiprocessing."""
    retries = fiber.config.get_config().pool_max_task_retries
    with ctx.Pool(2, error_handling=True) as pool:
        tries = ctx.Value("i", 0)
        assert pool.map(functools.partial(dh.raise_on, bad=3, times=2, tries=tries),
                        range(8), chunksize=1) == list(range(8))
        assert tries.value == 3
        tries = ctx.Value("i", 0)
        with pytest.raises(ValueError, match=f"try {retries + 1}"):
            pool.apply(dh.raise_on, (3, 3, 100, tries))
        assert tries.value == retries + 1
    with ctx.Pool(1) as pool:
        tries = ctx.Value("i", 0)
        with pytest.raises(ValueError, match="try 1"):
            pool.apply(dh.raise_on, (3, 3, 100, tries))
        assert tries.value == 1


def test_bad_arguments_of_the_original_api(ctx):
    with pytest.raises(TypeError, match="error_handling must be a bool"):
        ctx.Pool(1, error_handling="yes")
    with pytest.raises(NotImplementedError, match="cluster"):
        fiber.pool.ZPool(1, cluster="k8s")
    with ctx.Pool(1, error_handling=False) as pool:  # accepted: tasks are never lost
        pool.close()
        with pytest.raises(ValueError, match="Pool not running"):
            pool.wait_until_workers_up(timeout=60)
        with pytest.raises(ValueError, match="Pool not running"):
            pool.start_workers()


def test_wait_until_workers_up_fails_when_they_never_will_be(ctx):
    pool = ctx.Pool(2, initializer=ph.init_raises, initargs=("bad initializer",))
    try:
        with pytest.raises(BrokenPoolError, match="bad initializer"):
            pool.wait_until_workers_up(timeout=120)
    finally:
        pool.terminate()


@pytest.mark.parametrize("method", ["map_async", "starmap_async"])
def test_an_empty_map_async_never_calls_its_callback_as_the_stdlibs(ctx, method):
    """multiprocessing's MapResult of an empty iterable is ready at once and never calls
    ``callback``; fiber's called it with ``[]``, which code counting callbacks would see."""
    import multiprocessing

    def outcome(pool):
        called = []
        result = getattr(pool, method)(dh.triple, [], callback=called.append,
                                       error_callback=called.append)
        assert result.ready()
        value = result.get(timeout=30)
        pool.close()
        pool.join()
        return value, result.successful(), called

    with multiprocessing.Pool(1) as pool:
        expected = outcome(pool)
    with ctx.Pool(1) as pool:
        assert outcome(pool) == expected == ([], True, [])
