"""fiber.futures on the local backend alone: argument checks, the drop-in for pool users,
and what a program's end does with an executor's pending work (a script run as
``__main__``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

import fiber
from fiber.futures import Executor
from fiber.testing.conformance.support.waiting import wait_until

import support
from support import futures_helpers


def square(x: int) -> int:
    return x * x


def test_bad_max_workers():
    with pytest.raises(ValueError):
        Executor(0)


@pytest.mark.parametrize("value,error", [("2", TypeError), (2.0, TypeError), (0, ValueError)])
def test_bad_max_tasks_per_child_as_the_stdlib(value, error):
    """The stdlib's types and words (its executor takes the argument from Python 3.11:
    compared with it there)."""
    import concurrent.futures as cf
    import multiprocessing

    words = {TypeError: "max_tasks_per_child must be an integer",
             ValueError: "max_tasks_per_child must be >= 1"}[error]
    with pytest.raises(error) as ours:
        Executor(1, max_tasks_per_child=value)
    assert str(ours.value) == words
    if sys.version_info >= (3, 11):
        with pytest.raises(error) as theirs:
            cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                   max_tasks_per_child=value)
        assert str(theirs.value) == words


def test_a_multiprocessing_context_is_refused_clearly():
    """A stdlib context would start no fiber job: a TypeError naming fiber.get_context(),
    not an AttributeError from inside the pool."""
    import multiprocessing

    with pytest.raises(TypeError, match=r"fiber\.get_context"):
        Executor(1, mp_context=multiprocessing.get_context("spawn"))
    with pytest.raises(TypeError, match=r"fiber\.get_context"):
        fiber.Pool(1, context=multiprocessing.get_context("spawn"))


def test_fiber_module_is_a_drop_in_for_pool_users():
    import fiber as multiprocessing

    with multiprocessing.Pool(2) as pool:
        assert pool.map(square, [1, 2, 3]) == [1, 4, 9]
    assert fiber.futures.ProcessPoolExecutor is Executor


@pytest.mark.parametrize("kind", ["fiber", "stdlib"])
@pytest.mark.parametrize("cancel_futures", [False, True])
def test_the_interpreter_waits_for_pending_work_at_exit(tmp_path, kind, cancel_futures):
    """A program that shuts an executor down without waiting, drops it and ends still gets
    its pending calls done, as concurrent.futures documents (the stdlib executor is run
    alike); with cancel_futures, only those a worker held run."""
    out = subprocess.run(
        [sys.executable, futures_helpers.__file__, kind, str(tmp_path),
         "1", "10", "1" if cancel_futures else "0"],
        capture_output=True, text=True, timeout=120, env=support.subprocess_env())
    assert out.returncode == 0, out.stderr
    written = len(os.listdir(tmp_path))
    if not cancel_futures:
        assert written == 10, out.stderr
    elif kind == "fiber":  # the stdlib's cancels nothing once the executor was dropped
        assert 1 <= written < 10, out.stderr


def test_a_result_interrupted_after_its_reply_came_still_settles_the_future(monkeypatch):
    """A Ctrl-C that lands in ``result()`` just after the thread served its own reply (the
    delivery then leaves settling to that thread): the future is still settled, so other
    waiters and done-callbacks see it. The interrupt is raised by a stand-in for the
    flag's wait, after the real wait returned."""
    import concurrent.futures as cf

    from fiber.pool._results import _Flag

    real = _Flag.wait_serving
    with Executor(1) as ex:
        fut = ex.submit(square, 7)
        flag = fut._source._event

        def interrupted(self, timeout):
            real(self, timeout)
            if self is flag:
                raise KeyboardInterrupt

        monkeypatch.setattr(_Flag, "wait_serving", interrupted)
        with pytest.raises(KeyboardInterrupt):
            fut.result(timeout=60)
        monkeypatch.undo()
        called = []
        done, _ = cf.wait([fut], timeout=30)
        fut.add_done_callback(called.append)
        assert done == {fut} and called == [fut]
        assert fut.result(timeout=0) == 49


def test_a_future_done_while_a_submit_waits_for_the_hub_does_not_deadlock(monkeypatch):
    """At interpreter exit (Python 3.12+ refuse new threads then) a pool's callbacks run
    in the thread delivering its results, under the hub's lock: the executor's own
    done-callback must not wait there for the executor's lock, which a ``submit`` in
    another thread holds while it waits for the hub's lock. The refused thread is a
    stand-in (``Thread.start`` raises for the pool's callback thread, as at exit)."""
    import threading

    real_start = threading.Thread.start

    def start(self):
        if self.name.startswith("fiber-pool-callbacks-"):
            raise RuntimeError("can't create new thread at interpreter shutdown")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    with Executor(1) as ex:
        hub = ex._pool._core.hub
        fut = ex.submit(square, 3)
        with ex._lock:  # the result is delivered meanwhile, under the hub's lock
            time.sleep(0.5)
            assert hub.lock.acquire(timeout=20), "the hub's lock was not let go"
            hub.lock.release()
        assert fut.result(timeout=30) == 9
        assert ex.submit(square, 4).result(timeout=30) == 16
        ex.shutdown(wait=True)
        # the done futures left to the lock's holder (the first; the second too if it was
        # settled while its submit held the lock) are taken out by the next call
        assert not ex._futures


def test_done_callbacks_run_on_the_callback_thread_not_in_result(monkeypatch):
    """As the stdlib's run them on its manager thread: a done-callback never runs in the
    thread waiting in ``result()``, which may hold a lock the callback takes (it hung
    there) and must keep to its timeout (a slow callback made it overrun)."""
    import threading

    lock = threading.Lock()
    ran = []

    def callback(fut):
        with lock:
            ran.append((fut.result(), threading.current_thread()))

    with Executor(1) as ex:
        fut = ex.submit(square, 5)
        fut.add_done_callback(callback)
        with lock:  # the caller holds what the callback takes
            assert fut.result(timeout=30) == 25
        slow = ex.submit(square, 6)
        slow.add_done_callback(lambda f: time.sleep(3))
        t0 = time.monotonic()
        assert slow.result(timeout=30) == 36
        assert time.monotonic() - t0 < 2.5
        wait_until(lambda: bool(ran), 30)
        assert ran[0][0] == 25 and ran[0][1] is not threading.current_thread()


class _Loaded:
    """A result whose unpickling in the master is interrupted (a Ctrl-C) the first time."""

    interrupt = [True]

    def __init__(self, x: int) -> None:
        self.x = x

    def __reduce__(self):
        return (_rebuild, (self.x,))


def _rebuild(x: int) -> _Loaded:
    if _Loaded.interrupt and _Loaded.interrupt.pop():
        raise KeyboardInterrupt
    return _Loaded(x)


def _loaded(x: int) -> _Loaded:
    return _Loaded(x)


def _again(fn):
    """``fn()`` after an interrupt: a second KeyboardInterrupt fails the test (it would
    end pytest's session)."""
    try:
        return fn()
    except KeyboardInterrupt:
        pytest.fail("the Ctrl-C became the result's outcome")


@pytest.mark.parametrize("how", ["future", "apply_async", "imap", "map_async"])
def test_a_ctrl_c_while_a_result_is_unpickled_loses_nothing(how):
    """A KeyboardInterrupt raised while a result is unpickled is raised there, once: it is
    not the result's outcome for ever after, nor does an imap lose that item."""
    _Loaded.interrupt[:] = [True]
    with Executor(1) as ex:
        pool = ex._pool
        if how == "future":
            fut = ex.submit(_loaded, 3)
            with pytest.raises(KeyboardInterrupt):
                fut.result(timeout=30)
            assert _again(lambda: fut.result(timeout=30)).x == 3
            return
        if how == "imap":
            it = pool.imap(_loaded, [1, 2, 3])
            with pytest.raises(KeyboardInterrupt):
                it.next(timeout=30)
            assert _again(lambda: [v.x for v in it]) == [1, 2, 3]
            return
        res = (pool.apply_async(_loaded, (4,)) if how == "apply_async"
               else pool.map_async(_loaded, [4, 5]))
        res.wait(30)
        with pytest.raises(KeyboardInterrupt):
            res.get(timeout=30)
        got = _again(lambda: res.get(timeout=30))
        assert (got.x if how == "apply_async" else [v.x for v in got]) == \
            (4 if how == "apply_async" else [4, 5])
