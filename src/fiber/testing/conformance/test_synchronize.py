"""Lock, RLock, Semaphore, BoundedSemaphore, Event, Condition, Barrier, Value and Array
between processes on the backend under test."""

from __future__ import annotations

import ctypes
import multiprocessing
import pickle
import threading
import time

import pytest

import fiber

from .support import manager_helpers as mh
from .support.waiting import wait_until


def test_lock_basics_match_multiprocessing(ctx):
    def scenario(lock):
        out = [lock.acquire(), lock.acquire(False), lock.acquire(timeout=0.1)]
        lock.release()
        with lock:
            out.append(lock.acquire(block=False))
        try:
            lock.release()
        except ValueError as e:
            out.append(str(e))
        return out
    assert scenario(ctx.Lock()) == scenario(multiprocessing.Lock())


def test_lock_timeout_is_decided_by_the_server(ctx):
    lock = ctx.Lock()
    lock.acquire()
    t = time.monotonic()
    assert lock.acquire(timeout=0.3) is False
    assert 0.25 < time.monotonic() - t < 10
    threading.Timer(0.2, lock.release).start()
    assert lock.acquire(timeout=30)  # another thread released it
    lock.release()


def test_rlock_reentrant_and_owned(ctx):
    r = ctx.RLock()
    with r:
        with r:
            assert r._is_mine()
    with pytest.raises(AssertionError, match="not owned"):
        r.release()
    got = []
    r.acquire()
    th = threading.Thread(target=lambda: got.append(r.acquire(timeout=0.2)))
    th.start()
    th.join(30)
    assert got == [False]  # another thread cannot take it
    out = ctx.Queue()
    p = ctx.Process(target=mh.release_foreign, args=(r, out))
    p.start()
    assert out.get(timeout=60).startswith("AssertionError")  # nor another process
    p.join(60)
    r.release()


def test_lock_counts_exactly_across_processes(ctx):
    lock, value = ctx.Lock(), ctx.Value("i", 0, lock=False)
    procs = [ctx.Process(target=mh.add_under_lock, args=(lock, value, 50)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert value.value == 150


def test_lock_released_when_its_holder_dies(ctx):
    lock, acquired = ctx.Lock(), ctx.Event()
    p = ctx.Process(target=mh.hold_lock_then_die, args=(lock, acquired))
    p.start()
    assert acquired.wait(60)
    assert lock.acquire(timeout=0.1) is False  # held by the child
    t = time.monotonic()
    assert lock.acquire(timeout=30)  # the hub released it when the child died
    waited = time.monotonic() - t
    p.join(30)
    assert p.exitcode == -9
    assert waited < 5
    lock.release()


def test_lock_pickles_and_any_process_may_release_it(ctx):
    lock = ctx.Lock()
    clone = pickle.loads(pickle.dumps(lock))
    assert clone.acquire(timeout=5)
    assert not lock.acquire(False)
    out = ctx.Queue()
    p = ctx.Process(target=mh.release_foreign, args=(lock, out))
    p.start()
    assert out.get(timeout=60) == "released"  # as multiprocessing.Lock allows
    p.join(60)
    assert lock.acquire(timeout=5)
    lock.release()


def test_semaphores(ctx):
    s = ctx.Semaphore(2)
    assert s.acquire() and s.acquire(timeout=1) and not s.acquire(False)
    assert s.get_value() == 0
    out = ctx.Queue()
    p = ctx.Process(target=mh.acquire_and_report, args=(s, out, 60))
    p.start()
    time.sleep(0.3)
    s.release()  # lets the child in
    assert out.get(timeout=60) is True
    p.join(60)
    s.release()
    s.release()
    s.release()  # an unbounded semaphore goes above its initial value
    assert s.get_value() == 3
    b = ctx.BoundedSemaphore(1)
    with b:
        assert b.get_value() == 0
    with pytest.raises(ValueError, match="released too many times"):
        b.release()
    with pytest.raises(ValueError):
        ctx.Semaphore(-1)


def test_event_wakes_a_waiting_process(ctx):
    e, out = ctx.Event(), ctx.Queue()
    assert not e.is_set() and e.wait(0.1) is False
    p = ctx.Process(target=mh.wait_event, args=(e, out, 60))
    p.start()
    time.sleep(0.5)
    e.set()
    got, waited = out.get(timeout=60)
    p.join(60)
    assert got is True and waited < 30
    assert e.is_set() and e.wait(0)
    e.clear()
    assert not e.is_set()


def test_condition_notify_wakes_waiters_in_other_processes(ctx):
    cond, flag, out = ctx.Condition(), ctx.Value("i", 0), ctx.Queue()
    procs = [ctx.Process(target=mh.condition_waiter, args=(cond, flag, out)) for _ in range(2)]
    for p in procs:
        p.start()
    time.sleep(0.5)
    with cond:
        flag.value = 1
        cond.notify_all()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(60)
    assert got == [("woken", True, True)] * 2


def test_condition_semantics(ctx):
    cond = ctx.Condition(ctx.Lock())
    with pytest.raises(AssertionError):
        cond.wait(0.1)
    with pytest.raises(AssertionError):
        cond.notify()
    with cond:
        t = time.monotonic()
        assert cond.wait(0.2) is False
        assert time.monotonic() - t >= 0.15
        assert cond.wait_for(lambda: False, timeout=0.2) is False
        assert cond.wait_for(lambda: 7) == 7
        cond.notify()  # nobody waits: nothing happens
    woken = []

    def waiter():
        with cond:
            woken.append(cond.wait(30))
    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for th in threads:
        th.start()
    wait_until(lambda: _waiting(cond) == 3, 30,
               message="three waiters")
    with cond:
        cond.notify(2)
    wait_until(lambda: len(woken) == 2, 30, message="two woken")
    time.sleep(0.2)
    assert len(woken) == 2  # notify(2) woke exactly two
    with cond:
        cond.notify_all()
    for th in threads:
        th.join(30)
    assert woken == [True, True, True]


def _waiting(cond) -> int:
    from fiber._core import _runtime

    return len(_runtime.hub()._services[cond._name].tickets)


def test_barrier_across_processes(ctx):
    out = ctx.Queue()
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=mh.barrier_party, args=(barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    mine = barrier.wait(timeout=60)
    got = sorted([out.get(timeout=60)[1] for _ in procs] + [mine])
    for p in procs:
        p.join(60)
    assert got == [0, 1, 2]
    assert barrier.parties == 3 and barrier.n_waiting == 0 and not barrier.broken


def test_barrier_action_abort_reset_timeout(ctx):
    ran = []
    b = ctx.Barrier(2, action=lambda: ran.append(1))
    th = threading.Thread(target=b.wait, args=(30,))
    th.start()
    assert b.wait(30) in (0, 1)
    th.join(30)
    assert ran == [1]  # the last arrival (here, this process) ran the action once
    t = time.monotonic()
    with pytest.raises(fiber.BrokenBarrierError):
        b.wait(timeout=0.2)  # alone: times out and breaks the barrier
    assert time.monotonic() - t < 10 and b.broken
    with pytest.raises(fiber.BrokenBarrierError):
        b.wait(30)
    b.reset()
    assert not b.broken
    out = ctx.Queue()
    p = ctx.Process(target=mh.barrier_party, args=(b, out))
    p.start()
    wait_until(lambda: b.n_waiting == 1, 60, message="the child waits")
    b.abort()
    assert out.get(timeout=60) == ("broken", None)
    p.join(60)


def test_barrier_breaks_when_a_party_vanishes(ctx):
    b = ctx.Barrier(3)
    p = ctx.Process(target=mh.barrier_party, args=(b, ctx.Queue()))
    p.start()
    wait_until(lambda: b.n_waiting == 1, 60, message="the child waits")
    p.kill()
    p.join(30)
    with pytest.raises(fiber.BrokenBarrierError):
        b.wait(timeout=30)


def test_value_and_its_lock_across_processes(ctx):
    v = ctx.Value("i", 0)
    procs = [ctx.Process(target=mh.add_with_value_lock, args=(v, 40)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert v.value == 120
    assert isinstance(v.get_lock(), fiber.RLock)
    with v:  # the Value's own context manager takes its lock
        v.value = 7
    assert v.get_obj().value == 7


def test_value_access_waits_for_a_lock_held_elsewhere(ctx):
    v = ctx.Value("d", 1.5)
    lock = v.get_lock()
    lock.acquire()
    got = []
    th = threading.Thread(target=lambda: got.append(v.value))
    th.start()
    time.sleep(0.3)
    assert got == []  # as in multiprocessing, each access takes the lock
    v.value = 2.5  # the holder itself may use it
    lock.release()
    th.join(30)
    assert got == [2.5]


def test_value_semantics_match_multiprocessing(ctx):
    def scenario(mod):
        out = []
        b = mod.Value("b", 127)
        b.value += 1  # wraps as ctypes does
        out.append(b.value)
        d = mod.Value(ctypes.c_double, 0.25, lock=False)
        out.append((d.value, hasattr(d, "get_lock")))
        a = mod.Array("i", range(5))
        a[1:3] = [9, 9]
        out.append((a[:], a[-1], len(a), list(a)))
        s = mod.Array("c", b"hi\0there")
        out.append((s.value, s.raw))
        s.value = b"yo"
        out.append(s.raw)
        with pytest.raises(IndexError):
            a[10]
        r = mod.RawArray("d", 3)
        r[0] = 1
        out.append(r[:])
        out.append(mod.RawValue("L", 5).value)
        return out
    assert scenario(ctx) == scenario(multiprocessing)


def test_array_shared_with_a_child(ctx):
    arr = ctx.Array("q", 4)
    p = ctx.Process(target=mh.write_array, args=(arr, 100))
    p.start()
    p.join(60)
    assert p.exitcode == 0 and arr[:] == [100, 101, 102, 103]


def test_value_with_a_given_lock(ctx):
    lock = ctx.RLock()
    v = ctx.Value("i", 1, lock=lock)
    assert v.get_lock() is lock
    with pytest.raises(AttributeError):
        ctx.Value("i", 1, lock=object())
    with pytest.raises(TypeError):
        ctx.Value("not a type")
