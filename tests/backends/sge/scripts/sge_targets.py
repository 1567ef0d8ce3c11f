"""Targets of the Grid Engine tests' child processes (importable by the jobs: this
directory is on the master's sys.path, which the children receive)."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Tuple

import fiber


def where(x: int, seconds: float = 0.0) -> Tuple[int, str, int]:
    """``(x, host, pid)`` after ``seconds``."""
    if seconds:
        time.sleep(seconds)
    return x, socket.gethostname(), os.getpid()


def square_where(x: int) -> Tuple[int, int, str, str]:
    """``(x, x * x, host, Grid Engine job and task)`` after 0.1 s."""
    time.sleep(0.1)
    job = f"{os.environ.get('JOB_ID')}.{os.environ.get('SGE_TASK_ID')}"
    return x, x * x, socket.gethostname(), job


def exit_with(code: int) -> None:
    sys.exit(code)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def kill_self(sig: int) -> None:
    os.kill(os.getpid(), sig)


def put_host(q: Any) -> None:
    q.put((socket.gethostname(), os.environ.get("JOB_ID", "")))


def start_grandchild(q: Any) -> None:
    """Start a Grid Engine process from inside a Grid Engine job; report both hosts and
    job ids."""
    import fiber

    ctx = fiber.get_context("sge")
    inner = ctx.Queue()
    p = ctx.Process(target=put_host, args=(inner,))
    p.start()
    grandchild = inner.get(timeout=120)
    p.join(60)
    q.put({"child": (socket.gethostname(), os.environ.get("JOB_ID", "")),
           "grandchild": grandchild, "grandchild_exitcode": p.exitcode})


@fiber.meta(cpu=2, memory=2048)
def two_slots(q: Any) -> None:
    """Put the job's slots and its virtual memory limit (kB, as ``ulimit -v``)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    q.put((int(os.environ["NSLOTS"]), soft // 1024 if soft > 0 else -1))
