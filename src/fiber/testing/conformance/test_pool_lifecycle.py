"""fiber.Pool, continued from test_pool.py: its life cycle, what its tasks can be, and how it
schedules them, on the backend under test; compared with multiprocessing.Pool where the
semantics are the same."""

from __future__ import annotations

import collections
import functools
import gc
import multiprocessing
import pickle
import threading
import time
import weakref

import numpy as np
import pytest

from fiber.errors import PoolTerminatedError, RemoteTraceback

from .support import pool_helpers as ph
from .support.waiting import gone, wait_until
from .test_pool import connected, drain, live, worker_pids

# map(), apply(), starmap() and join() have no timeout of their own: bound every test
pytestmark = pytest.mark.timeout(120)


def cube(x):  # defined in the test module: workers import it by reference
    return x ** 3


# -- life cycle ----------------------------------------------------------------------------


@pytest.mark.local_pids
def test_context_manager_terminates(ctx, mp_pool):
    with ctx.Pool(2) as pool:
        assert pool.apply_async(ph.square, (3,)).get(timeout=60) == 9
        r = pool.apply_async(ph.sleep_return, ("never", 60))
        wait_until(lambda: connected(pool) == 2, 60, message="both workers connected")
        pids = worker_pids(pool)
        t = time.monotonic()
    assert time.monotonic() - t < 20
    assert all(gone(pid) for pid in pids)  # terminate() ended the workers before returning
    with pytest.raises(PoolTerminatedError):
        r.get(timeout=10)
    with pytest.raises(ValueError):
        pool.apply_async(ph.square, (1,))
    with multiprocessing.get_context("spawn").Pool(1) as ref:
        pass
    with pytest.raises(ValueError):
        ref.apply_async(ph.square, (1,))  # the same after multiprocessing's with-block


@pytest.mark.local_pids
def test_close_then_join_finishes_the_work(ctx):
    pool = ctx.Pool(2)
    r = pool.map_async(ph.sleep_then_pid, range(40), 1)
    a = pool.apply_async(ph.sleep_return, ("last", 0.5))
    pool.close()
    wait_until(lambda: connected(pool) == 2 or r.ready(), 60, message="workers connected")
    pids = worker_pids(pool)
    pool.join()
    assert r.ready() and a.ready()
    assert [x for x, _ in r.get(timeout=0)] == list(range(40))
    assert a.get(timeout=0) == "last"
    wait_until(lambda: all(gone(pid) for pid in pids), 30, message="workers to exit")
    assert live(pool) == []


@pytest.mark.parametrize("method,chunksize", [("imap", 1), ("imap_unordered", 3)])
def test_close_and_join_before_an_imap_is_iterated_run_all_of_it(ctx, method, chunksize):
    """As multiprocessing's: an imap taken before close() runs all its input by join(),
    iterated or not (fiber read only a window of it ahead of its consumer: 16 of 200
    tasks had run, and the iterator then raised "Pool not running")."""
    def run(pool):
        it = getattr(pool, method)(ph.square, range(200), chunksize)
        first = next(it)  # (multiprocessing's imap_unordered of chunks: a generator)
        pool.close()
        pool.join()
        return sorted([first, *it])

    with ctx.Pool(2) as pool:
        ours = run(pool)
    with multiprocessing.get_context("spawn").Pool(2) as reference:  # (closed: its own)
        theirs = run(reference)
    assert ours == theirs == sorted(x * x for x in range(200))


def test_an_imap_after_terminate_ends_and_never_waits_for_ever(ctx):
    """Its tasks fail with PoolTerminatedError, the input it could not submit says so
    once, and it ends (a consumer that took its errors and asked on waited for ever)."""
    pool = ctx.Pool(2)
    it = pool.imap(functools.partial(ph.sleep_return, seconds=0.05), range(200))
    assert it.next(timeout=60) == 0
    pool.terminate()
    raised = []
    while True:
        try:
            it.next(timeout=30)
        except StopIteration:
            break
        except Exception as e:  # (a TimeoutError fails the test)
            assert not isinstance(e, multiprocessing.TimeoutError)
            raised.append(type(e).__name__)
    assert set(raised[:-1]) == {"PoolTerminatedError"} and raised[-1] == "ValueError"
    pool.join()


def test_join_before_close_raises(ctx, mp_pool):
    with pytest.raises(ValueError):
        mp_pool.join()
    with ctx.Pool(1) as pool:
        with pytest.raises(ValueError):
            pool.join()
        assert pool.apply_async(ph.square, (2,)).get(timeout=60) == 4  # still running


@pytest.mark.parametrize("how", ["close", "terminate"])
def test_a_closed_pool_refuses_work(ctx, how):
    pool = ctx.Pool(1)
    getattr(pool, how)()
    calls = [
        lambda: pool.apply_async(ph.square, (1,)),
        lambda: pool.apply(ph.square, (1,)),
        lambda: pool.map_async(ph.square, [1]),
        lambda: pool.map(ph.square, [1]),
        lambda: pool.starmap_async(ph.add, [(1, 2)]),
        lambda: pool.imap(ph.square, [1]),
        lambda: pool.imap_unordered(ph.square, [1]),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="not running"):
            call()
    pool.join()


def test_bad_arguments(ctx):
    for n in (0, -1):
        with pytest.raises(ValueError):
            ctx.Pool(n)
    with pytest.raises(TypeError):
        ctx.Pool(1, initializer=3)
    with pytest.raises(ValueError):
        ctx.Pool(1, maxtasksperchild=0)
    with ctx.Pool(1) as pool:
        with pytest.raises(ValueError):
            pool.map_async(ph.square, [1, 2], 0)
        with pytest.raises(ValueError):
            pool.imap(ph.square, [1, 2], 0)
        with pytest.raises(ValueError):
            pool.resize(0)


def test_a_pool_cannot_be_pickled(ctx, mp_pool):
    with pytest.raises(NotImplementedError):
        pickle.dumps(mp_pool)
    with ctx.Pool(1) as pool:
        with pytest.raises(NotImplementedError):
            pickle.dumps(pool)
        with pytest.raises(NotImplementedError):  # not as a task's argument either
            pool.apply_async(ph.square, (pool,)).get(timeout=60)


def test_initializer_and_initargs_run_in_each_worker(ctx):
    with ctx.Pool(3, initializer=ph.set_state, initargs=("init", 42)) as pool:
        wait_until(lambda: connected(pool) == 3, 60, message="three workers connected")
        out = pool.map_async(functools.partial(ph.sleep_return, seconds=0.02), range(60),
                             1).get(timeout=60)
        assert out == list(range(60))
        states = pool.map_async(ph.get_state, range(60), 1).get(timeout=60)
    assert {s for s, _ in states} == {("init", 42)}
    assert len({pid for _, pid in states}) >= 2


def test_maxtasksperchild_replaces_workers(ctx):
    with ctx.Pool(2, maxtasksperchild=3) as pool:
        out = pool.map_async(ph.with_process_key, range(30), 1).get(timeout=120)
        assert [x for x, _ in out] == list(range(30))
        per_worker = collections.Counter(key for _, key in out)
        assert max(per_worker.values()) <= 3, per_worker
        assert len(per_worker) >= 10 > 2
        assert pool.apply_async(ph.square, (9,)).get(timeout=60) == 81


@pytest.mark.local_pids
def test_resize_grow_and_shrink_while_a_map_runs(ctx):
    with ctx.Pool(2) as pool:
        r = pool.map_async(functools.partial(ph.sleep_then_pid, seconds=0.02), range(300), 1)
        pool.resize(4)
        wait_until(lambda: connected(pool) == 4, 60, message="four workers connected")
        assert not r.ready()
        pool.resize(1)
        out = r.get(timeout=120)
        assert [x for x, _ in out] == list(range(300))
        assert len({pid for _, pid in out}) >= 3  # the added workers took part
        wait_until(lambda: len(live(pool)) == 1, 60, message="one worker left")
        wait_until(lambda: len(pool._core.procs) == 1, 60, message="retired workers exited")
        (survivor,) = worker_pids(pool)
        again = pool.map_async(ph.with_pid, range(20), 1).get(timeout=60)
        assert again == [(x, survivor) for x in range(20)]
        pool.resize(2)
        wait_until(lambda: connected(pool) == 2, 60, message="grown again")
        assert pool.map_async(ph.square, range(10)).get(timeout=60) == [x * x for x in range(10)]


@pytest.mark.local_pids
def test_garbage_collected_pool_ends_its_workers(ctx):
    pool = ctx.Pool(2)
    assert pool.map_async(ph.square, range(10)).get(timeout=60) == [x * x for x in range(10)]
    wait_until(functools.partial(lambda p: connected(p) == 2, pool), 60,
               message="both workers connected")
    pids = worker_pids(pool)
    maintainer = pool._core.maintainer.name
    ref = weakref.ref(pool)
    del pool
    gc.collect()
    assert ref() is None
    wait_until(lambda: all(gone(pid) for pid in pids), 30, message="workers to exit")
    wait_until(lambda: maintainer not in [t.name for t in threading.enumerate()], 30,
               message="the pool's thread to end")


@pytest.mark.local_pids
def _unnamed_pools(ctx):
    """Results of pools nobody names (outside an assert, whose rewriting keeps the
    intermediate values alive)."""
    it = ctx.Pool(2).imap(cube, range(4))
    gc.collect()
    first = list(it)
    result = ctx.Pool(2).map_async(cube, range(4))
    gc.collect()
    second = result.get(60)
    result = ctx.Pool(1).apply_async(cube, (3,))
    gc.collect()
    return first, second, result.get(60)


def test_a_pool_held_only_by_its_results_runs_them(ctx):
    """As multiprocessing: a result or an imap iterator keeps its pool alive, so a pool
    used without a name is not terminated by its collection under a pending result."""
    assert _unnamed_pools(ctx) == ([0, 1, 8, 27], [0, 1, 8, 27], 27)
    ref = weakref.ref(ctx.Pool(1))  # with nothing holding it, it is collected
    gc.collect()
    assert ref() is None


def test_terminate_fails_unfinished_results(ctx):
    pool = ctx.Pool(2)
    slow = functools.partial(ph.sleep_return, seconds=60)
    r = pool.apply_async(ph.sleep_return, ("x", 60))
    m = pool.map_async(slow, range(4), 1)
    it = pool.imap(slow, range(4))
    errors = []
    e = pool.apply_async(slow, (1,), error_callback=errors.append)
    wait_until(lambda: any(ws.pending for ws in live(pool)), 60, message="tasks running")
    pids = worker_pids(pool)
    t = time.monotonic()
    pool.terminate()
    assert time.monotonic() - t < 20
    for res in (r, m, e):
        with pytest.raises(PoolTerminatedError) as info:
            res.get(timeout=10)
        assert res.ready() and not res.successful()
        # this process's own error: no remote traceback heads it
        assert info.value.__cause__ is None, repr(info.value.__cause__)
    with pytest.raises(PoolTerminatedError):
        it.next(timeout=10)
    pool.join()
    assert all(gone(pid) for pid in pids)
    wait_until(lambda: len(errors) == 1, 10, message="error callback")
    assert isinstance(errors[0], PoolTerminatedError)


# -- what tasks can be -------------------------------------------------------------------


def test_remote_exception_reraised_with_its_type_and_remote_traceback(ctx):
    with ctx.Pool(1) as pool:
        with pytest.raises(ValueError) as info:
            pool.apply_async(ph.raise_value_error, ("boom-42",)).get(timeout=60)
        assert str(info.value) == "boom-42"
        cause = info.value.__cause__
        assert isinstance(cause, RemoteTraceback)
        assert "raise_value_error" in cause.tb and "ValueError: boom-42" in cause.tb
        assert "Traceback" in cause.tb
        # the pool keeps working, on the same worker
        assert pool.apply_async(ph.square, (11,)).get(timeout=60) == 121
        assert pool.map_async(ph.square, range(5)).get(timeout=60) == [0, 1, 4, 9, 16]


def test_lambdas_and_closures_go_by_value(ctx):
    factor = 7

    def make_adder(n):
        def adder(x):
            return x + n
        return adder

    with ctx.Pool(2) as pool:
        assert pool.map_async(lambda x: x * factor, range(10)).get(timeout=60) == [
            x * 7 for x in range(10)]
        assert drain(pool.imap(make_adder(100), range(5))) == [100, 101, 102, 103, 104]
        assert pool.apply_async(lambda a, b=1: a - b, (10,), {"b": 4}).get(timeout=60) == 6


def test_functions_of_the_test_module(ctx):
    with ctx.Pool(2) as pool:
        assert pool.map_async(cube, range(6)).get(timeout=60) == [0, 1, 8, 27, 64, 125]
        assert pool.apply_async(cube, (4,)).get(timeout=60) == 64


def test_the_state_of_a_callable_is_taken_at_each_call(ctx, mp_pool):
    """A callable object (or a bound method) changed between two calls: the second call
    runs with the new state, as with multiprocessing (which pickles it with each task)."""

    def scenario(pool):
        s = ph.Scale(2)
        first = pool.map_async(s, [1, 2]).get(timeout=60)
        s.k = 3
        second = pool.map_async(s, [1, 2]).get(timeout=60)
        method_first = pool.map_async(s.times, [1, 2]).get(timeout=60)
        s.k = 4
        method_second = pool.map_async(s.times, [1, 2]).get(timeout=60)
        return first, second, method_first, method_second

    expected = ([2, 4], [3, 6], [3, 6], [4, 8])
    assert scenario(mp_pool) == expected
    with ctx.Pool(2) as pool:
        assert scenario(pool) == expected


def test_distinct_unhashable_callables_are_not_confused(ctx, mp_pool):
    """Unhashable callables made and dropped one after the other may share an id()."""

    def scenario(pool):
        return [pool.map_async(ph.ScaleRecord(k), [1]).get(timeout=60)[0] for k in range(2, 12)]

    assert scenario(mp_pool) == list(range(2, 12))
    with ctx.Pool(2) as pool:
        assert scenario(pool) == list(range(2, 12))


def test_large_numpy_array_argument_and_result(ctx):
    a = np.arange(50 * 2 ** 20 // 8, dtype=np.float64)  # 50 MB
    with ctx.Pool(1) as pool:
        out = pool.apply_async(ph.negate, (a,)).get(timeout=120)
        assert out.shape == a.shape and np.array_equal(out, -a)
        assert out.flags.writeable
        (again,) = pool.map_async(ph.negate, [out]).get(timeout=120)
        assert np.array_equal(again, a)


# -- scheduling ------------------------------------------------------------------------------


@pytest.mark.local_pids
def test_the_first_worker_works_before_the_others_have_connected(ctx):
    # workers 2 to 4 take 30 s to start: the pool must not wait for them (the first, or
    # a replacement of it, starts at once)
    slow = ("PoolWorker-2", "PoolWorker-3", "PoolWorker-4")
    with ctx.Pool(4, initializer=ph.slow_start, initargs=(30, slow)) as pool:
        t = time.monotonic()
        pid = pool.apply_async(ph.getpid).get(timeout=20)
        assert time.monotonic() - t < 20
        ready = [ws for ws in live(pool) if ws.connected]
        # A forked worker can answer before the pool's start_all() has returned its pid.
        wait_until(lambda: all(ws.process.pid is not None for ws in ready), 10,
                   message="the worker's pid known")
        assert [ws.process.pid for ws in ready] == [pid]
        out = pool.map_async(ph.square, range(30), 1).get(timeout=20)
        assert out == [x * x for x in range(30)]


def test_a_pool_starts_exactly_its_workers(ctx):
    """A worker that starts quickly must not be turned away (told to stop, then replaced)
    because it said hello before the pool registered it."""
    replaced = []
    for _ in range(10):
        with ctx.Pool(4) as pool:
            wait_until(lambda: connected(pool) == 4, 60, message="four workers connected")
            ids = sorted(ws.worker_id for ws in live(pool))
            if ids != [1, 2, 3, 4]:
                replaced.append(ids)
    assert replaced == []


def test_tasks_may_call_objects_of_the_masters_hub(ctx):
    """A task waiting for a reply from the master's queue, lock or event while the master
    pushes the worker its next tasks: no task is taken for a reply and lost (they were,
    and the map hung, while the worker's task channel was its thread's cached client)."""
    queue, lock, event = ctx.Queue(), ctx.Lock(), ctx.Event()
    event.set()
    for i in range(60):
        queue.put(1000 * i)
    with ctx.Pool(2) as pool:
        task = functools.partial(ph.use_master_objects, queue=queue, lock=lock, event=event)
        out = pool.map_async(task, range(60), 1).get(timeout=60)
    assert sorted(v - v % 1000 for v in out) == [1000 * i for i in range(60)]
    assert sorted(v % 1000 for v in out) == list(range(60))


def test_a_fresh_pools_first_worker_does_not_take_the_others_work(ctx):
    """Tasks of a function whose length is not known yet are handed one per worker: 4
    tasks on a fresh Pool(4) all run at once (they wait for each other), instead of the
    first worker to connect holding 3 of them."""
    started, gate = ctx.Queue(), ctx.Event()
    with ctx.Pool(4) as pool:
        result = pool.map_async(functools.partial(ph.gated, gate=gate, started=started),
                                ["long"] * 4, 1)
        for _ in range(4):
            started.get(timeout=300)  # all four running together
        gate.set()
        assert result.get(60) == ["long"] * 4


def test_slow_tasks_are_not_held_behind_a_long_one(ctx):
    """Once a function's tasks are known to be slow (30 ms), a worker holds one at a
    time: the short tasks all go to the other worker while one runs a long task, instead
    of some waiting behind it (the long one ends only once they are all done)."""
    gate = ctx.Event()
    task = functools.partial(ph.gated, gate=gate)  # pickles alike: one function id
    with ctx.Pool(2) as pool:
        assert pool.map(task, range(6), 1) == list(range(6))  # now known to be slow
        it = pool.imap_unordered(task, ["long", *range(8)], 1)
        assert sorted(it.next(timeout=60) for _ in range(8)) == list(range(8))
        gate.set()
        assert it.next(timeout=60) == "long"


def test_one_call_at_a_time_runs_on_the_worker_that_ran_the_last(ctx):
    """``apply`` in a loop (an RL step) goes back to the worker that returned the previous
    call, still polling for its next task, instead of around every idle worker (each
    asleep by its turn, to be woken)."""
    with ctx.Pool(3) as pool:
        wait_until(lambda: connected(pool) == 3, 60, message="three workers connected")
        keys = {pool.apply(ph.with_process_key, (i,))[1] for i in range(20)}
    assert len(keys) == 1, keys


def test_a_map_of_short_tasks_is_spread_over_the_workers(ctx):
    with ctx.Pool(4) as pool:  # not waiting for the workers to connect
        out = pool.map_async(functools.partial(ph.sleep_then_key, seconds=0.01), range(200),
                             1).get(timeout=120)
    assert [x for x, _ in out] == list(range(200))
    assert len({key for _, key in out}) >= 2  # hostname:pid, as every pod has the same pids


def test_after_close_no_worker_starts_only_to_be_stopped(ctx):
    """Closed, with one long task running and nothing queued, the idle worker stops and
    none is started in its place (each would be stopped at once, and replaced again:
    a job submitted every few ms while the task ran)."""
    with ctx.Pool(2) as pool:
        pool.wait_until_workers_up(timeout=240)
        long = pool.apply_async(ph.sleep_return, ("done", 2.0))
        wait_until(lambda: any(ws.pending for ws in pool._core.live_workers()), 60,
                   message="a worker runs the long task")
        pool.close()
        assert long.get(timeout=60) == "done"
        pool.join()
        assert next(pool._core._worker_ids) == 3  # workers 1 and 2, and no other
