"""Managers as multiprocessing programs use them: a manager's ``Pool`` as a
context manager, registered types exposing their public methods only, a manager ``Lock``
acquired in one process and released in another (also after that one has ended), the
errors of a manager ``RLock`` and ``Condition`` used without their lock."""

from __future__ import annotations

import multiprocessing
import multiprocessing.managers
import pickle

import pytest

from fiber.errors import RemoteTraceback
from fiber.managers import BaseManager, RemoteError

from .support import dropin_helpers as dh

pytestmark = pytest.mark.timeout(180)


class CounterManager(BaseManager):
    pass


CounterManager.register("Counter", dh.Counter)
CounterManager.register("ResettableCounter", dh.Counter, exposed=("add", "_reset"))


def test_a_managers_pool_is_a_context_manager(ctx):
    with ctx.Manager() as manager:
        with manager.Pool(2) as pool:
            assert pool.map(dh.triple, range(5)) == [0, 3, 6, 9, 12]
            async_result = pool.apply_async(dh.triple, (7,))
            assert async_result.get(60) == 21
        # __exit__ terminated it, as multiprocessing's PoolProxy does
        with pytest.raises(ValueError, match="Pool not running"):
            pool.map(dh.triple, [1])
        # a pool proxy dropped at once: the manager stops that pool off its hub thread
        # and goes on serving (the pool's workers need the hub to say goodbye)
        manager.Pool(1)
        assert manager.list([1, 2])[:] == [1, 2]
        with manager.Pool(1) as again:
            assert again.apply(dh.triple, (2,)) == 6


def test_a_registered_type_exposes_its_public_methods_only(ctx):
    with CounterManager(ctx=ctx) as manager:
        counter = manager.Counter()
        assert counter.add(2) == 2
        with pytest.raises(AttributeError):
            counter._reset()
        with pytest.raises(AttributeError, match="not in exposed"):
            counter._callmethod("_reset")
        assert counter.add(1) == 3  # nothing was reset
        assert "add" in dir(counter) and "_reset" not in dir(counter)


def test_a_private_method_named_in_exposed_is_reachable(ctx):
    # as multiprocessing's (CPython's suite registers exposed=('f', '_h'))
    with CounterManager(ctx=ctx) as manager:
        counter = manager.ResettableCounter()
        assert counter.add(2) == 2
        counter._reset()
        assert counter.add(1) == 1
        assert not hasattr(counter, "_other") and not hasattr(counter, "__other__")


def test_a_manager_lock_is_released_by_another_process(ctx):
    with ctx.Manager() as manager:
        lock, q, back = manager.Lock(), ctx.Queue(), ctx.Queue()
        # acquired here, released by a child
        assert lock.acquire(timeout=10)
        p = ctx.Process(target=dh.release_lock, args=(lock, q))
        p.start()
        assert q.get(timeout=60) == "released"
        p.join(60)
        assert lock.acquire(timeout=10)  # free again
        lock.release()
        # acquired by a child, released here while the child still runs
        p = ctx.Process(target=dh.acquire_and_wait, args=(lock, q, back))
        p.start()
        assert q.get(timeout=60) == "acquired"
        assert not lock.acquire(timeout=0.2)
        lock.release()
        assert lock.acquire(timeout=10)
        lock.release()
        back.put("done")
        p.join(60)
        assert p.exitcode == 0


def test_a_manager_lock_stays_held_when_its_holder_ends(ctx):
    # a manager's Lock is a threading.Lock (CPython's TestSyncManagerTypes.test_lock):
    # a child takes it and exits, the parent releases it; fiber's own Lock would have
    # been released with its holder, making this release fail
    with ctx.Manager() as manager:
        lock = manager.Lock()
        p = ctx.Process(target=dh.acquire_then_exit, args=(lock,))
        p.start()
        p.join(60)
        assert p.exitcode == 0
        assert not lock.acquire(timeout=0.2)  # still held
        lock.release()
        with pytest.raises(RuntimeError):  # threading.Lock's error
            lock.release()
        assert lock.acquire(timeout=10)
        lock.release()


def _unacquired_errors(manager) -> list:
    rlock, cond = manager.RLock(), manager.Condition()
    errors = []
    for use in (rlock.release, lambda: cond.wait(0.1), cond.notify, cond.notify_all,
                cond.release):
        with pytest.raises(RuntimeError) as info:
            use()
        errors.append(str(info.value))
    return errors


def test_a_manager_rlock_and_condition_used_unacquired_raise_runtime_error(ctx):
    # multiprocessing's manager serves threading's RLock and Condition: releasing the
    # RLock, or waiting on, notifying or releasing the Condition, without holding the
    # lock raises threading's RuntimeError (fiber's own raise AssertionError, as
    # multiprocessing.RLock and Condition do)
    with multiprocessing.Manager() as reference:
        expected = _unacquired_errors(reference)
    with ctx.Manager() as manager:
        assert _unacquired_errors(manager) == expected


def test_errors_multiprocessing_reports_as_remote_error_are_both(ctx):
    # multiprocessing raises RemoteError for a method that is not exposed and for an
    # object whose creation fails; fiber raises an error that is a RemoteError and of
    # the error's own type, so both kinds of except clause work
    with CounterManager(ctx=ctx) as manager:
        counter = manager.Counter()
        with pytest.raises(RemoteError) as info:
            counter._callmethod("_reset")
        err = info.value
        assert isinstance(err, AttributeError) and "not in exposed" in str(err)
        assert isinstance(err, multiprocessing.managers.RemoteError)
        assert isinstance(err.__cause__, RemoteTraceback) and err.remote_traceback
        again = pickle.loads(pickle.dumps(err))
        assert type(again) is type(err) and str(again) == str(err)
    with ctx.Manager() as manager:
        with pytest.raises(RemoteError) as info:
            manager.Pool(-1)
        assert isinstance(info.value, ValueError)
        d = manager.dict()
        with pytest.raises(KeyError) as info:  # a method's own error: itself, as there
            d["missing"]
        assert not isinstance(info.value, RemoteError)
