"""Targets of the Slurm tests' child processes (importable by the jobs: this directory is
on the master's sys.path, which the children receive)."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Tuple


def hostname() -> str:
    return socket.gethostname()


def where(x: int, seconds: float = 0.0) -> Tuple[int, str, int]:
    """``(x, host, pid)`` after ``seconds``."""
    if seconds:
        time.sleep(seconds)
    return x, socket.gethostname(), os.getpid()


def square_where(x: int) -> Tuple[int, int, str, int]:
    """``(x, x * x, host, pid)`` after 0.2 s."""
    time.sleep(0.2)
    return x, x * x, socket.gethostname(), os.getpid()


def slow_square(x: int) -> Tuple[int, str]:
    time.sleep(0.25)
    return x * x, socket.gethostname()


def say(text: str) -> None:
    print(text, flush=True)


def exit_with(code: int) -> None:
    sys.exit(code)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def kill_self(sig: int) -> None:
    os.kill(os.getpid(), sig)


def put_host(q: Any) -> None:
    q.put((socket.gethostname(), os.environ.get("SLURM_JOB_ID", "")))


def start_grandchild(q: Any) -> None:
    """Start a Slurm process from inside a Slurm job; report both hosts and job ids."""
    import fiber

    ctx = fiber.get_context("slurm")
    inner = ctx.Queue()
    p = ctx.Process(target=put_host, args=(inner,))
    p.start()
    grandchild = inner.get(timeout=120)
    p.join(60)
    q.put({"child": (socket.gethostname(), os.environ.get("SLURM_JOB_ID", "")),
           "grandchild": grandchild, "grandchild_exitcode": p.exitcode})


