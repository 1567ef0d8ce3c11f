"""fiber.Pool: the multiprocessing.Pool API over job-backed workers, on the backend under
test; compared with multiprocessing.Pool where the semantics are the same."""

from __future__ import annotations

import functools
import itertools
import multiprocessing
import threading
import time

import pytest

import fiber
from fiber.errors import RemoteTraceback
from fiber.pool._credit import MAX_FAR_CREDIT

from .support import pool_helpers as ph
from .support.waiting import recorded_jobs, wait_until

# map(), apply(), starmap() and join() have no timeout of their own: bound every test
pytestmark = pytest.mark.timeout(120)

# -- helpers -------------------------------------------------------------------------------


def live(pool):
    """The pool's workers that have not been lost."""
    return pool._core.live_workers()


def connected(pool) -> int:
    return sum(1 for ws in live(pool) if ws.connected)


def worker_pids(pool):
    return [process.pid for process in recorded_jobs(pool)]


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


def test_a_failed_map_raises_once_every_chunk_has_run(ctx, mp_pool):
    """As multiprocessing's: a map whose first chunk fails at once raises once its other
    chunks have run (fiber raised at once: a program that caught the error found their
    work not done, and ``with Pool()`` then ended them)."""
    def run(pool):
        start = time.monotonic()
        r = pool.starmap_async(ph.fail_or_sleep, [(i, 0.5) for i in range(4)], 1)
        with pytest.raises(ValueError, match="bad item 0"):
            r.get(timeout=60)
        return time.monotonic() - start, r

    elapsed, _ = run(mp_pool)
    assert elapsed >= 0.5
    with ctx.Pool(2) as pool:
        elapsed, r = run(pool)
        assert elapsed >= 0.5 and r.completed == 3 and r.total == 4
        assert not r.successful()


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
    """imap reads a bounded window ahead of what is taken: twice what its workers may
    hold, which on links measured slow (a loaded host) is up to ``MAX_FAR_CREDIT``
    chunks each (docs/contributing/pools.md, "Credit"), never the whole input."""
    source = itertools.count()
    with ctx.Pool(2) as pool:
        it = getattr(pool, method)(ph.square, source, chunksize)
        first = take(it, 50)
        drawn = next(source)  # how many items imap took from the generator
    if method == "imap":
        assert first == [x * x for x in range(50)]
    else:
        assert len(set(first)) == 50 and all(int(v ** 0.5) ** 2 == v for v in first)
    most = 50 + chunksize * (2 * 2 * MAX_FAR_CREDIT + 1)
    assert 50 <= drawn <= most, drawn


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
