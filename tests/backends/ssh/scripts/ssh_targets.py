"""Targets of the ssh backend tests' jobs (importable by the jobs: this directory is on
the master's sys.path, which the jobs receive, and the hosts share this filesystem)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Tuple


def where(x: int, seconds: float = 0.0) -> Tuple[int, str, int]:
    """``(x, host, pid)`` after ``seconds``."""
    if seconds:
        time.sleep(seconds)
    return x, socket.gethostname(), os.getpid()


def square_where(x: int, seconds: float = 0.0) -> Tuple[int, int, str, int]:
    """``(x, x * x, host, pid)`` after ``seconds``."""
    if seconds:
        time.sleep(seconds)
    return x, x * x, socket.gethostname(), os.getpid()


def span(seconds: float) -> Tuple[str, float, float]:
    """``(host, start, end)`` of a job that runs ``seconds`` (wall clock: one machine)."""
    start = time.time()
    time.sleep(seconds)
    return socket.gethostname(), start, time.time()


def span_to(q: Any, seconds: float) -> None:
    q.put(span(seconds))


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def put_where(q: Any) -> None:
    q.put((socket.gethostname(), os.getpid()))


def environment(q: Any, names: Tuple[str, ...]) -> None:
    """Put what this job sees of ``names`` in ``os.environ``, and whether its startup
    environment (``/proc/self/environ``, what ``ps e`` shows) holds any ``FIBER_``."""
    with open("/proc/self/environ", "rb") as f:
        startup = f.read()
    q.put(({n: os.environ.get(n) for n in names}, b"FIBER_" in startup))


def wait_for(gate: Any) -> bool:
    return bool(gate.wait(120))


def say_then_sleep(text: str, seconds: float) -> None:
    print(text, flush=True)
    time.sleep(seconds)


def exit_with(code: int) -> None:
    raise SystemExit(code)


def hard_exit(code: int) -> None:
    os._exit(code)


def kill_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(10)
