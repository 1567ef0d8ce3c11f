"""A blocking ``acquire`` of a ``Lock``, ``RLock`` or ``Semaphore`` in a job, abandoned by
an exception its SIGALRM handler raises (the alarm idiom): the job sees its own
exception, and the lock (or the semaphore's unit) that its holder frees afterwards, or
freed just before (granted to the abandoned request), is not kept by that request for
ever: the main process takes it at once. The job lives on meanwhile without reading its
connection again, as in test_abandoned_gets_local. Real jobs of the local backend."""

from __future__ import annotations

import time
from typing import Any

import pytest
from test_abandoned_gets_local import _alarm

import fiber

_MAKE = {"Lock": fiber.Lock, "RLock": fiber.RLock, "Semaphore": lambda: fiber.Semaphore(0)}


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


@pytest.mark.parametrize("kind", sorted(_MAKE))
@pytest.mark.parametrize("released_first", [False, True],
                         ids=["release-after", "release-in-handler"])
def test_an_acquire_abandoned_by_a_signal_handler_keeps_nothing(kind, released_first):
    prim, out, go = _MAKE[kind](), fiber.Queue(), fiber.Queue()
    holder = fiber.Process(target=release_when_told, args=(prim, out, go, kind != "Semaphore"))
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
