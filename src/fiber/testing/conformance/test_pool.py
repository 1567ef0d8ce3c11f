"""fiber.Pool: the multiprocessing.Pool API over job-backed workers, on the backend under
test; compared with multiprocessing.Pool where the semantics are the same."""

from __future__ import annotations

import collections
import functools
import gc
import itertools
import multiprocessing
import pickle
import threading
import time
import weakref

import numpy as np
import psutil
import pytest

import fiber
from fiber.errors import PoolTerminatedError, RemoteTraceback

from .support import pool_helpers as ph
from .support.waiting import wait_until

# map(), apply(), starmap() and join() have no timeout of their own: bound every test
pytestmark = pytest.mark.timeout(120)

# -- helpers -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mp_pool():
    """The reference: a multiprocessing pool (spawn, like fiber's fresh interpreters)."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        yield pool


def live(pool):
    """The pool's workers that have not been lost."""
    return pool._core.live_workers()


def connected(pool) -> int:
    return sum(1 for ws in live(pool) if ws.connected)


def worker_pids(pool):
    return [ws.process.pid for ws in list(pool._core.procs.values())]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def take(it, n: int, timeout: float = 60):
    return [it.next(timeout=timeout) for _ in range(n)]


def drain(it, timeout: float = 60):
    """Every remaining result of an imap iterator, each wait bounded."""
    out = []
    while True:
        try:
            out.append(it.next(timeout=timeout))
        except StopIteration:
            return out


def outcomes(it, timeout: float = 60):
    """An imap iterator's items as ("ok", value) or ("err", type name, message)."""
    out = []
    while True:
        try:
            out.append(("ok", it.next(timeout=timeout)))
        except StopIteration:
            return out
        except Exception as e:
            out.append(("err", type(e).__name__, str(e)))


def cube(x):  # defined in the test module: workers import it by reference
    return x ** 3


# -- apply ---------------------------------------------------------------------------------


def test_apply_from_several_threads(ctx):
    """One waiting thread serves the hub's connections and the others wait as usual
    (see Server.wait_serving): each thread gets exactly its own results."""
    out = {}
    with ctx.Pool(2) as pool:
        def run(k):
            out[k] = [pool.apply(ph.square, (k * 100 + i,)) for i in range(50)]

        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert out == {k: [(k * 100 + i) ** 2 for i in range(50)] for k in range(4)}


def _wait_polled(pool, tasks: int, seconds: float) -> float:
    """The time this process spends polling while it waits for ``tasks`` tasks of
    ``seconds`` each (wall time in the poll loop: a loaded host gives the thread less
    CPU, not less of that)."""
    r = pool.starmap_async(ph.sleep_return, [(i, seconds) for i in range(tasks)],
                           chunksize=1)
    start = fiber.transport.cpus.polled_seconds()
    assert r.get(timeout=60) == list(range(tasks))
    return fiber.transport.cpus.polled_seconds() - start


def test_waiting_thread_polls_then_sleeps(ctx, monkeypatch):
    """A thread waiting for a result polls the connections for ``spin_us`` before it
    sleeps, and never longer; with 0 it sleeps at once."""
    monkeypatch.setattr(fiber.transport.cpus, "spare_cpu", lambda: True)  # a quiet host
    with fiber.config.override(spin_us=200_000):
        with ctx.Pool(1) as pool:
            pool.apply(ph.square, (1,))  # connected
            spun = _wait_polled(pool, 1, 1.5)
    assert 0.15 < spun < 0.7, spun
    with fiber.config.override(spin_us=0):
        with ctx.Pool(1) as pool:
            pool.apply(ph.square, (1,))
            slept = _wait_polled(pool, 1, 1.5)
    assert slept < 0.01, slept


def test_waiting_thread_leaves_the_cpus_to_busy_workers(ctx):
    """Workers that keep every CPU of this host busy (on every backend here: its jobs
    all run on this machine) make the waiting thread sleep, however large its budget:
    polling would delay the results it waits for."""
    cpus = fiber.transport.cpus.CPUS
    with fiber.config.override(spin_us=2_000_000):
        with ctx.Pool(cpus) as pool:
            wait_until(lambda: connected(pool) == cpus, 60)
            r = pool.map_async(ph.burn, [1.5] * cpus, chunksize=1)
            start = time.thread_time()
            assert r.get(timeout=60) == [True] * cpus
            waited = time.thread_time() - start
    assert waited < 0.1, waited


@pytest.mark.parametrize("spare", [True, False])
def test_an_idle_worker_polls_for_its_next_task_while_a_cpu_is_spare(ctx, spare):
    """A worker with nothing to do polls for its next task for ``spin_us`` before it
    sleeps (an RL/ES step's next task often comes within a round trip), only while the
    host has a CPU to spare."""
    with fiber.config.override(spin_us=300_000):  # the config travels to the workers
        with ctx.Pool(1, initializer=ph.pretend_spare_cpu, initargs=(spare,)) as pool:
            before = pool.apply(ph.polled_seconds)
            time.sleep(1.0)  # the worker is idle
            polled = pool.apply(ph.polled_seconds) - before
    if spare:
        assert 0.25 < polled < 0.7, polled
    else:
        assert polled < 0.05, polled


def test_apply_matches_multiprocessing(ctx, mp_pool):
    with ctx.Pool(2) as pool:
        assert pool.apply(ph.square, (7,)) == 49
        got = pool.apply(ph.kwargs_echo, (1, 2), {"a": 3})
        assert got == mp_pool.apply(ph.kwargs_echo, (1, 2), {"a": 3}) == ((1, 2), {"a": 3})
        assert pool.apply_async(ph.square, [5]).get(timeout=60) == 25


def test_async_result_get_wait_ready_successful(ctx):
    with ctx.Pool(2) as pool:
        r = pool.apply_async(ph.sleep_return, ("v", 1.5))
        assert not r.ready()
        with pytest.raises(ValueError):
            r.successful()
        t = time.monotonic()
        assert r.wait(0.2) is None
        assert 0.15 < time.monotonic() - t < 10 and not r.ready()
        r.wait(60)
        assert r.ready() and r.successful()
        assert r.get(timeout=0) == "v" and r.get(timeout=0) == "v"

        bad = pool.apply_async(ph.raise_value_error, ("nope",))
        bad.wait(60)
        assert bad.ready() and not bad.successful()
        with pytest.raises(ValueError, match="nope"):
            bad.get(timeout=0)


def test_get_timeout_raises_multiprocessing_timeout_error(ctx):
    with ctx.Pool(1) as pool:
        r = pool.apply_async(ph.sleep_return, ("late", 2.0))
        t = time.monotonic()
        with pytest.raises(multiprocessing.TimeoutError):
            r.get(timeout=0.3)
        assert 0.25 < time.monotonic() - t < 10
        it = pool.imap(functools.partial(ph.sleep_return, seconds=2.0), ["a"])
        with pytest.raises(multiprocessing.TimeoutError):
            it.next(timeout=0.3)
        assert r.get(timeout=60) == "late"  # the result still arrives
        assert it.next(timeout=60) == "a"


# -- map, starmap ----------------------------------------------------------------------


@pytest.mark.parametrize("chunksize", [None, 1, 3, 7, 100])
def test_map_matches_multiprocessing(ctx, mp_pool, chunksize):
    xs = list(range(53))
    with ctx.Pool(2) as pool:
        got = pool.map(ph.square, xs, chunksize)
        assert got == mp_pool.map(ph.square, xs, chunksize) == [x * x for x in xs]
        assert pool.map_async(ph.square, iter(xs), chunksize).get(timeout=60) == got
        assert pool.map_async(ph.square, [3], chunksize).get(timeout=60) == [9]


def test_map_of_an_empty_iterable_matches_multiprocessing(ctx, mp_pool):
    with ctx.Pool(2) as pool:
        assert mp_pool.map(ph.square, []) == []
        assert pool.map_async(ph.square, []).get(timeout=60) == []
        assert pool.starmap_async(ph.add, []).get(timeout=60) == []
        assert pool.map_async(ph.square, [], 5).get(timeout=60) == []


def test_map_results_are_in_order_when_tasks_finish_out_of_order(ctx):
    # early items are the slowest: they finish last but must come first
    delays = [0.3, 0.2, 0.1] + [0.0] * 20
    with ctx.Pool(3) as pool:
        got = pool.starmap(ph.sleep_return, [(i, d) for i, d in enumerate(delays)], 1)
    assert got == list(range(len(delays)))


def test_map_async_callback_and_error_callback_called_once(ctx):
    ok, err = [], []
    ok2, err2 = [], []
    with ctx.Pool(2) as pool:
        good = pool.map_async(ph.square, range(20), 3, callback=ok.append,
                              error_callback=err.append)
        bad = pool.map_async(ph.fail_on_5, range(20), 2, callback=ok2.append,
                             error_callback=err2.append)
        assert good.get(timeout=60) == [x * x for x in range(20)]
        with pytest.raises(ValueError, match="bad item 5"):
            bad.get(timeout=60)
        pool.close()
        pool.join()  # all callbacks have run once the pool is joined
    assert ok == [[x * x for x in range(20)]] and err == []
    assert ok2 == [] and len(err2) == 1
    assert isinstance(err2[0], ValueError) and str(err2[0]) == "bad item 5"


def test_apply_async_callbacks_called_once_off_the_caller_thread(ctx):
    calls = []

    def record(kind):
        return lambda v: calls.append((kind, v, threading.current_thread().name))

    with ctx.Pool(2) as pool:
        r1 = pool.apply_async(ph.square, (6,), callback=record("ok"),
                              error_callback=record("err"))
        r2 = pool.apply_async(ph.raise_value_error, ("cb-boom",), callback=record("ok"),
                              error_callback=record("err"))
        r1.wait(60)
        r2.wait(60)
        pool.close()
        pool.join()  # all callbacks have run once the pool is joined
        assert sorted(c[0] for c in calls) == ["err", "ok"]
        (ok,) = [c for c in calls if c[0] == "ok"]
        (err,) = [c for c in calls if c[0] == "err"]
        assert ok[1] == 36
        assert isinstance(err[1], ValueError) and str(err[1]) == "cb-boom"
        assert threading.current_thread().name not in (ok[2], err[2])


def test_callback_has_run_when_get_returns(ctx, mp_pool):
    """multiprocessing runs the callback before the result becomes ready, so code may rely
    on it once get() returned; fiber's pool must give the same guarantee."""

    def scenario(pool):
        seen = []

        def slow_callback(value):
            time.sleep(0.5)
            seen.append(value)

        assert pool.apply_async(ph.square, (3,), callback=slow_callback).get(timeout=60) == 9
        after_apply = list(seen)
        assert pool.map_async(ph.square, [1, 2], callback=slow_callback).get(timeout=60) == [1, 4]
        return after_apply, list(seen)

    assert scenario(mp_pool) == ([9], [9, [1, 4]])
    with ctx.Pool(2) as pool:
        assert scenario(pool) == ([9], [9, [1, 4]])


def test_starmap_matches_multiprocessing(ctx, mp_pool):
    pairs = [(i, 2 * i) for i in range(25)]
    with ctx.Pool(2) as pool:
        got = pool.starmap(ph.add, pairs)
        assert got == mp_pool.starmap(ph.add, pairs) == [3 * i for i in range(25)]
        assert pool.starmap_async(ph.add, pairs, 4).get(timeout=60) == got
        assert pool.starmap_async(ph.add, iter(pairs), 1).get(timeout=60) == got


def test_map_exception_from_a_chunk_matches_multiprocessing(ctx, mp_pool):
    with pytest.raises(ValueError) as ref:
        mp_pool.map(ph.fail_on_5, range(20), 3)
    with ctx.Pool(2) as pool:
        with pytest.raises(ValueError) as got:
            pool.map(ph.fail_on_5, range(20), 3)
        assert str(got.value) == str(ref.value) == "bad item 5"
        assert isinstance(got.value.__cause__, RemoteTraceback)
        assert pool.map_async(ph.fail_on_5, range(5), 3).get(timeout=60) == [0, 10, 20, 30, 40]


# -- imap ------------------------------------------------------------------------------


@pytest.mark.parametrize("chunksize", [1, 7])
def test_imap_in_order_and_unordered_complete(ctx, mp_pool, chunksize):
    xs = list(range(60))
    expected = [x * x for x in xs]
    with ctx.Pool(2) as pool:
        assert drain(pool.imap(ph.square, xs, chunksize)) == expected
        assert list(mp_pool.imap(ph.square, xs, chunksize)) == expected
        assert sorted(drain(pool.imap_unordered(ph.square, iter(xs), chunksize))) == expected
        it = pool.imap(ph.square, [])
        with pytest.raises(StopIteration):
            it.next(timeout=60)


def test_imap_unordered_yields_in_completion_order(ctx):
    items = [("slow", 2.0)] + [(i, 0.0) for i in range(8)]
    with ctx.Pool(2) as pool:
        wait_until(lambda: connected(pool) == 2, 60, message="both workers connected")
        unordered = drain(pool.imap_unordered(_call_sleep_return, items))
        ordered = drain(pool.imap(_call_sleep_return, items))
    assert sorted(map(str, unordered)) == sorted(map(str, ordered))
    assert ordered[0] == "slow" and unordered[0] != "slow"


def _call_sleep_return(item):
    return ph.sleep_return(*item)


@pytest.mark.parametrize("method,chunksize", [("imap", 1), ("imap", 4),
                                              ("imap_unordered", 1)])
def test_imap_is_lazy_over_an_endless_generator(ctx, method, chunksize):
    source = itertools.count()
    with ctx.Pool(2) as pool:
        it = getattr(pool, method)(ph.square, source, chunksize)
        first = take(it, 50)
        drawn = next(source)  # how many items imap took from the generator
    if method == "imap":
        assert first == [x * x for x in range(50)]
    else:
        assert len(set(first)) == 50 and all(int(v ** 0.5) ** 2 == v for v in first)
    assert 50 <= drawn < 1000, drawn


@pytest.mark.parametrize("n", [0, 3, 100])
@pytest.mark.parametrize("method", ["imap", "imap_unordered"])
def test_an_input_that_raises_matches_multiprocessing(ctx, mp_pool, method, n):
    """imap yields the results of what the input gave, then raises the input's error,
    then stops; never raised by imap() itself, nor losing results in flight."""
    def run(pool, ends_after_error=True):
        it = getattr(pool, method)(ph.square, ph.count_then_fail(n))
        got = []
        try:
            for _ in range(n + 1):
                got.append(it.next(timeout=60))
        except KeyError as e:
            got.append(("raised", str(e)))
        if ends_after_error:
            with pytest.raises(StopIteration):
                it.next(timeout=60)
        return got

    with ctx.Pool(2) as pool:
        ours = run(pool)
    theirs = run(mp_pool, ends_after_error=method == "imap")
    assert ours[-1] == ("raised", "'the input failed'")
    assert sorted(ours[:-1]) == [x * x for x in range(n)]
    if method == "imap":
        assert ours == theirs
    else:  # multiprocessing's error may overtake results (it is a task of its own)
        assert ours[-1] in theirs


def test_one_imap_iterator_shared_by_threads(ctx):
    """Threads taking from one iterator get every result once between them and all see
    its end (one of them waited for ever for a result that another had taken)."""
    with ctx.Pool(2) as pool:
        it = pool.imap(ph.square, range(200))
        got = []
        threads = [threading.Thread(target=lambda: got.extend(it), daemon=True)
                   for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert sorted(got) == [x * x for x in range(200)]


def test_imap_exceptions_match_multiprocessing(ctx, mp_pool):
    expected = outcomes(mp_pool.imap(ph.fail_on_5, range(10)))
    assert expected[5] == ("err", "ValueError", "bad item 5") and len(expected) == 10
    with ctx.Pool(2) as pool:
        assert outcomes(pool.imap(ph.fail_on_5, range(10))) == expected
        got = outcomes(pool.imap_unordered(ph.fail_on_5, range(10)))
        assert sorted(got) == sorted(expected)


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
        out = pool.map_async(ph.with_process_key, range(30), 1).get(timeout=20)
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
