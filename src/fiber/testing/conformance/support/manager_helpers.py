"""Targets and types for the synchronization and manager tests (importable by children:
fiber is installed where they run)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from typing import Any

import fiber
import fiber.managers

# -- synchronization primitives --------------------------------------------------------


def exit_key(item: Any) -> Any:
    """A sort key that raises SystemExit (no ``Exception``)."""
    raise SystemExit(3)


def add_under_lock(lock: Any, value: Any, n: int) -> None:
    for _ in range(n):
        with lock:
            value.value += 1


def add_with_value_lock(value: Any, n: int) -> None:
    for _ in range(n):
        with value.get_lock():
            value.value += 1


def hold_lock_then_die(lock: Any, acquired: Any) -> None:
    lock.acquire()
    acquired.set()
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGKILL)


def release_foreign(lock: Any, out: Any) -> None:
    try:
        lock.release()
        out.put("released")
    except AssertionError as e:
        out.put(f"AssertionError: {e}")
    except ValueError as e:
        out.put(f"ValueError: {e}")


def acquire_and_report(sem: Any, out: Any, timeout: float) -> None:
    out.put(sem.acquire(timeout=timeout))


def wait_event(event: Any, out: Any, timeout: float) -> None:
    t = time.monotonic()
    got = event.wait(timeout)
    out.put((got, time.monotonic() - t))


def condition_waiter(cond: Any, flag: Any, out: Any) -> None:
    with cond:
        ok = cond.wait_for(lambda: flag.value == 1, timeout=60)
        out.put(("woken", ok, cond._lock._is_mine()))


def barrier_party(barrier: Any, out: Any) -> None:
    try:
        out.put(("index", barrier.wait(timeout=60)))
    except fiber.BrokenBarrierError:
        out.put(("broken", None))


def append_pid(items: Any) -> None:
    items.append(os.getpid())


def write_array(arr: Any, start: int) -> None:
    with arr.get_lock():
        for i in range(len(arr)):
            arr[i] = start + i


# -- managers --------------------------------------------------------------------------


def managed_work(d: Any, lst: Any, ns: Any, key: str) -> None:
    d[key] = os.getpid()
    lst.append(key)
    ns.seen = key


def add_to_managed(lock: Any, counter: Any, n: int) -> None:
    for _ in range(n):
        with lock:
            counter.value = counter.value + 1


def use_manager_at(address: str, out: Any) -> None:
    manager = Shop(address=address)
    manager.connect()
    shelf = manager.Shelf()
    shelf.put("from child")
    out.put((shelf.items(), shelf))


class Shelf:
    """A registered type with a private method, a failing method and a proxy result."""

    def __init__(self, *items: Any) -> None:
        self._items = list(items)

    def put(self, item: Any) -> int:
        self._items.append(item)
        return len(self._items)

    def items(self) -> list:
        return list(self._items)

    def fail(self, message: str) -> None:
        raise KeyError(message)

    def cancel(self) -> None:
        """Raises what is no ``Exception`` (a ``BaseException``, as ``SystemExit``)."""
        raise asyncio.CancelledError("cancelled in the manager")

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def pid(self) -> int:
        return os.getpid()

    def child(self) -> Shelf:
        return Shelf("inner")

    def _secret(self) -> str:
        return "hidden"


class Shop(fiber.managers.BaseManager):
    pass


Shop.register("Shelf", Shelf, method_to_typeid={"child": "Shelf"})
Shop.register("OnlyPut", Shelf, exposed=("put",))


class Counter:
    def __init__(self, start: int = 0) -> None:
        self.n = start

    def add(self, k: int) -> int:
        self.n += k
        return self.n

    def pid(self) -> int:
        return os.getpid()

    def where(self) -> str:
        """This process, uniquely across hosts and pods."""
        return f"{socket.gethostname()}:{os.getpid()}"

    def sleep(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    def fail(self, message: str) -> None:
        raise ValueError(message)


class Remote(fiber.managers.AsyncManager):
    pass


Remote.register("Counter", Counter)
Remote.register("LocalCounter", Counter, separate_job=False)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


Remote.register("Broken", kill_self)
