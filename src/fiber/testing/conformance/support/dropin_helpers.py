"""Targets of the drop-in tests' processes (test_dropin_*.py here and in fiber's
tests/backends/local/; importable by every job)."""

from __future__ import annotations

import os
import select
import signal
import threading
import time

import fiber

# -- parent_process() ------------------------------------------------------------------


def outlive_parent(q, back) -> None:  # type: ignore[no-untyped-def]
    """Report the parent alive, wait for it with ``join(timeout)``; once it is gone,
    report what ``parent_process()`` says then, answer one ``ping`` (proof that this job
    outlived its parent) and end."""
    import multiprocessing.connection

    parent = fiber.parent_process()
    q.put(("alive", os.getpid(), parent.is_alive()))
    parent.join(timeout=0.1)  # returns while the parent lives: a timeout, no error
    q.put(("joined early", parent.is_alive()))
    parent.join(timeout=120)
    ready = multiprocessing.connection.wait([parent.sentinel], timeout=0)
    q.put(("gone", parent.is_alive(), ready == [parent.sentinel]))
    q.put(("pong", back.get(timeout=120)))


def start_then_sleep(q, back) -> None:  # type: ignore[no-untyped-def]
    """The intermediate process: start ``outlive_parent`` and wait to be terminated."""
    child = fiber.Process(target=outlive_parent, args=(q, back))
    child.start()
    q.put(("intermediate", os.getpid()))
    time.sleep(120)


def grandchild_pid_then_sleep(q) -> None:  # type: ignore[no-untyped-def]
    q.put(os.getpid())
    time.sleep(120)


def put_start_method(q) -> None:  # type: ignore[no-untyped-def]
    """Say the start method this job was started with (``get_start_method()``)."""
    q.put(fiber.get_start_method())


def start_grandchild_then_sleep(q) -> None:  # type: ignore[no-untyped-def]
    fiber.Process(target=grandchild_pid_then_sleep, args=(q,)).start()
    time.sleep(120)


# -- signals -----------------------------------------------------------------------------


def wait_for_signal(q, signum: int) -> None:  # type: ignore[no-untyped-def]
    """Install a handler for ``signum``, say so with this process's pid, and report
    whether the signal came (within 60 s)."""
    got = threading.Event()
    signal.signal(signum, lambda *_: got.set())
    q.put(("ready", os.getpid()))
    q.put(("signalled", got.wait(60)))


# -- shared data -------------------------------------------------------------------------


def check_shared(value, array, q) -> None:  # type: ignore[no-untyped-def]
    """With the parent holding both locks: report whether they are held (a short
    acquire fails), then write through ``get_obj()`` and report the types seen."""
    import numpy as np

    busy = [not value.get_lock().acquire(timeout=0.2), not array.get_lock().acquire(timeout=0.2)]
    value.get_obj().value = 42
    view = array.get_obj()
    try:
        np.frombuffer(view, dtype=np.float64)[:] = [7.0, 8.0, 9.0]
        buffer = True
    except TypeError:  # another host: a handle, indexing only
        view[:] = [7.0, 8.0, 9.0]
        buffer = False
    q.put((busy, type(value).__name__, type(array).__name__, buffer))


def add_under_lock(value, n: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(n):
        with value.get_lock():
            value.value += 1


# -- connections -------------------------------------------------------------------------


def select_then_recv(conn, q) -> None:  # type: ignore[no-untyped-def]
    """In a process that did not make the pipe: wait with ``select`` on ``fileno()``, then
    ``recv``; report what select said before and after, and the messages."""
    fd = conn.fileno()
    before = select.select([fd], [], [], 0)[0]
    q.put(("waiting", before))
    got = []
    for _ in range(2):
        ready = select.select([fd], [], [], 60)[0]
        got.append((bool(ready), conn.recv()))
    after = select.select([fd], [], [], 0.2)[0]
    q.put(("got", got, after))


def send_later(conn, items, delay: float, hold=None) -> None:  # type: ignore[no-untyped-def]
    """Send ``items`` after ``delay`` s; then, given an event ``hold``, keep this end
    open until it is set (the other end sees no end of file before)."""
    time.sleep(delay)
    for item in items:
        conn.send(item)
    if hold is not None:
        hold.wait(60)


# -- managers ----------------------------------------------------------------------------


def release_lock(lock, q) -> None:  # type: ignore[no-untyped-def]
    try:
        lock.release()
        q.put("released")
    except Exception as e:
        q.put(repr(e))


def acquire_and_wait(lock, q, back) -> None:  # type: ignore[no-untyped-def]
    lock.acquire()
    q.put("acquired")
    back.get(timeout=120)  # holds it until the parent has released it


def logger_level(q) -> None:  # type: ignore[no-untyped-def]
    import fiber

    q.put(fiber.get_logger().getEffectiveLevel())


def acquire_then_exit(lock) -> None:  # type: ignore[no-untyped-def]
    lock.acquire()


class Counter:
    """A registered type: public methods, and private ones a proxy must not reach."""

    def __init__(self) -> None:
        self.n = 0

    def add(self, k: int) -> int:
        self.n += k
        return self.n

    def _reset(self) -> None:
        self.n = 0


def triple(x: int) -> int:
    return 3 * x


# -- pools ------------------------------------------------------------------------------


def unpicklable_result(x: object) -> object:
    return threading.Lock()


def pid_of(_: object) -> int:
    return os.getpid()


def exit_once_on(x: int, bad: int, flag) -> int:  # type: ignore[no-untyped-def]
    """Kill this worker the first time ``bad`` comes (``flag``, a shared Value, says so)."""
    if x == bad:
        with flag.get_lock():
            first = flag.value == 0
            flag.value = 1
        if first:
            os._exit(3)
    return x


def raise_on(x: int, bad: int, times: int, tries) -> int:  # type: ignore[no-untyped-def]
    """Raise ``ValueError`` the first ``times`` times ``bad`` comes (counted in ``tries``,
    a shared Value); else return ``x``."""
    if x == bad:
        with tries.get_lock():
            tries.value += 1
            n = tries.value
        if n <= times:
            raise ValueError(f"{x} raised (try {n})")
    return x


def report_parent_end(path: str) -> None:
    """A child of the main process: a thread waits for ``parent_process().join()`` and
    writes what ``is_alive()`` says then to ``path``; the job itself waits to be ended."""
    parent = fiber.parent_process()

    def watch() -> None:
        parent.join(120)
        with open(path, "w") as f:
            f.write(f"gone alive={parent.is_alive()}")

    threading.Thread(target=watch, daemon=True).start()
    print(os.getpid(), flush=True)
    time.sleep(120)
