"""A blocking ``acquire`` of a ``Lock``, ``RLock``, ``Semaphore``, ``BoundedSemaphore``
or a manager's ``Lock`` in a job, abandoned by an exception its SIGALRM handler raises
(the alarm idiom): the job sees its own
exception, and the lock (or the semaphore's unit) that its holder frees afterwards, or
freed just before (granted to the abandoned request), is not kept by that request for
ever: the main process takes it at once. The job lives on meanwhile without reading its
connection again, as in test_abandoned_gets_local. Likewise a ``Condition.wait``'s take-back
of an RLock held twice, granted before its abandon: no level of it is kept. Real jobs of
the local backend."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from test_abandoned_gets_local import _alarm

import fiber
from fiber.testing.conformance.support.waiting import wait_until

_MAKE = {"Lock": fiber.Lock, "RLock": fiber.RLock, "Semaphore": lambda: fiber.Semaphore(0),
         "BoundedSemaphore": lambda: fiber.BoundedSemaphore(1)}


def release_when_told(prim: Any, out: Any, go: Any, hold: bool) -> None:
    """Job A: holds ``prim`` (a lock: ``hold``), and releases it when told."""
    if hold:
        prim.acquire()
    out.put("held")
    go.get()
    prim.release()
    time.sleep(120)


def acquire_until_alarm(prim: Any, out: Any, go: Any, released_first: bool) -> None:
    """Job B: waits for ``prim`` until its alarm handler raises TimeoutError (telling A
    to release first, with ``released_first``: the grant then comes before the raise)."""
    go.qsize()  # connected to the hub (which serves prim too) before the alarm is set
    _alarm("TimeoutError", (lambda: go.put("release")) if released_first else None)
    try:
        prim.acquire()
        out.put("acquired")
    except TimeoutError:
        out.put("caught")
    except BaseException as e:  # noqa: BLE001 (reported to the test)
        out.put(repr(e))
    time.sleep(120)  # alive, and not reading its connection to the hub


def _abandon_then_take(prim: Any, hold: bool, released_first: bool) -> None:
    """A job holds ``prim`` (a lock: ``hold``), another's acquire of it is abandoned by
    its alarm handler (the holder releasing before the raise, with ``released_first``);
    then this process takes it at once: the abandoned acquire kept nothing."""
    out, go = fiber.Queue(), fiber.Queue()
    holder = fiber.Process(target=release_when_told, args=(prim, out, go, hold))
    waiter = fiber.Process(target=acquire_until_alarm, args=(prim, out, go, released_first))
    started = [holder]
    holder.start()
    try:
        assert out.get(timeout=60) == "held"
        started.append(waiter)
        waiter.start()
        assert out.get(timeout=60) == "caught"
        if not released_first:
            go.put("release")
        assert prim.acquire(timeout=10)  # not held by the abandoned acquire
        prim.release()
    finally:
        for p in started:
            p.terminate()
            p.join(30)


@pytest.mark.parametrize("kind", sorted(_MAKE))
@pytest.mark.parametrize("released_first", [False, True],
                         ids=["release-after", "release-in-handler"])
def test_an_acquire_abandoned_by_a_signal_handler_keeps_nothing(kind, released_first):
    _abandon_then_take(_MAKE[kind](), kind != "Semaphore", released_first)


@pytest.mark.parametrize("released_first", [False, True],
                         ids=["release-after", "release-in-handler"])
def test_a_managed_locks_acquire_abandoned_by_a_signal_handler_keeps_nothing(released_first):
    """The same with a ``SyncManager``'s ``Lock`` (its proxy's calls)."""
    with fiber.Manager() as manager:
        _abandon_then_take(manager.Lock(), True, released_first)


def wait_until_signalled(cond: Any, out: Any, go: Any) -> None:
    """Job B: holds ``cond``'s RLock twice and waits on ``cond``, until its SIGUSR1
    handler (sent while its wait takes the lock back) tells the test to release the lock,
    leaves the hub time to grant the take-back, and raises TimeoutError."""
    def handler(*_: Any) -> None:
        go.put("release")
        time.sleep(0.5)
        raise TimeoutError("signalled")

    go.qsize()  # connected to the hub (which serves cond and its lock too)
    signal.signal(signal.SIGUSR1, handler)
    cond.acquire()
    cond.acquire()  # the RLock's count is 2: the wait takes it back at 2
    out.put("holding")
    try:
        cond.wait()
        out.put("woken")
    except TimeoutError:
        out.put("caught")
    except BaseException as e:  # noqa: BLE001 (reported to the test)
        out.put(repr(e))
    time.sleep(120)  # alive, and not reading its connection to the hub


def test_a_condition_waits_take_back_abandoned_after_its_grant_keeps_no_level():
    """The take-back of a Condition's wait over an RLock held twice is granted (count 2),
    then abandoned by a signal handler's exception: both levels are released again, and
    the main process takes the lock (ff432c0; before it, one level stayed held by a job
    that did not know it holds the lock)."""
    lock = fiber.RLock()
    cond, out, go = fiber.Condition(lock), fiber.Queue(), fiber.Queue()
    waiter = fiber.Process(target=wait_until_signalled, args=(cond, out, go))
    waiter.start()
    try:
        assert out.get(timeout=60) == "holding"
        assert lock.acquire(timeout=60)  # once the wait released both levels
        cond.notify()
        parked = lock._service.waiters  # noqa: SLF001 - the hub of this process serves it
        wait_until(lambda: any(w.data[1] == 2 for w in list(parked)), 30,
                   message="the wait's take-back (count 2) parked behind this process")
        os.kill(waiter.pid, signal.SIGUSR1)
        assert go.get(timeout=60) == "release"
        lock.release()  # granted to the take-back while the job's handler sleeps
        assert out.get(timeout=60) == "caught"
        assert lock.acquire(timeout=5)  # neither level kept by the abandoned take-back
        lock.release()
    finally:
        waiter.terminate()
        waiter.join(30)
