"""Targets for ``concurrent.futures.ProcessPoolExecutor(mp_context=fiber_ctx)`` workers and
for fiber processes handed multiprocessing's own objects (test_stdlib_executor.py),
importable by the workers (fiber is installed where they run).

Run as a script, it is a program whose task and initializer are functions of ``__main__``
(what a user's script does): ``python stdlib_executor_helpers.py`` prints the results.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Tuple

if TYPE_CHECKING:
    import ctypes
    import multiprocessing.connection
    import multiprocessing.queues

    from fiber.connection import Connection
    from fiber.synchronize import Event

MODEL: object = None


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def load_model(value: object) -> None:
    global MODEL
    MODEL = value


def model_and_pid(x: int) -> Tuple[object, int, int]:
    return (MODEL, x, os.getpid())


def wait_for(event: Event) -> str:
    """Hold a worker until ``event`` (a fiber Event) is set."""
    event.wait(120)
    return "released"


def echo_through(requests: multiprocessing.queues.Queue[object],
                 replies: multiprocessing.connection.Connection) -> None:
    """Answer on ``replies`` (a multiprocessing Connection) what comes from ``requests``
    (a multiprocessing queue), until None."""
    while True:
        item = requests.get(timeout=60)
        if item is None:
            break
        replies.send(("echo", item, os.getpid()))
    replies.close()


def double_shared(value: ctypes.c_int, array: ctypes.Array[ctypes.c_double]) -> None:
    """Double a multiprocessing ``RawValue`` and each item of a ``RawArray``."""
    value.value *= 2
    array[:] = [x * 2 for x in array[:]]


# -- the script: functions of __main__ as tasks and initializer ---------------------------

counter = 0


def main_init(value: str) -> None:
    global counter
    counter = 100


def main_task(x: int) -> Tuple[int, bool]:
    global counter
    counter += 1
    return (x * 2, counter > 100)


def send_descriptors(conn: Connection) -> None:
    """Send the parent its ``multiprocessing`` authkey, then one end of a
    ``multiprocessing.Pipe`` and one of a socket pair (the other ends kept to answer)."""
    import multiprocessing
    import multiprocessing.connection
    import socket

    conn.send(bytes(multiprocessing.current_process().authkey))
    mine, theirs = multiprocessing.connection.Pipe()
    conn.send(theirs)
    mine.send("over a multiprocessing pipe")
    sock_mine, sock_theirs = socket.socketpair()
    conn.send(sock_theirs)
    sock_mine.sendall(b"over a socket")
    conn.recv()  # until the parent has read both


if __name__ == "__main__":
    import concurrent.futures as cf

    import fiber

    with cf.ProcessPoolExecutor(2, mp_context=fiber.get_context(),
                                initializer=main_init, initargs=("x",)) as ex:
        results = list(ex.map(main_task, range(6), timeout=120))
    print("results", [r[0] for r in results], all(r[1] for r in results))
    sys.stdout.flush()
