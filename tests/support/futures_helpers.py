"""Targets for executor workers (tests/backends/local/test_futures_local.py), and the script
that checks what an executor's pending work becomes at the end of a program; importable by
the workers and by that script, which get tests/ on their path."""

from __future__ import annotations

import concurrent.futures as cf
import os
import sys
import time
from typing import Any, Callable

import fiber.futures


def sleep_then_write(path: str, seconds: float) -> str:
    """Sleep, then create ``path``: the file tells that the task ran to its end."""
    time.sleep(seconds)
    with open(path, "w") as f:
        f.write("done")
    return path


EXECUTORS: dict[str, Callable[..., Any]] = {
    "fiber": fiber.futures.Executor,
    "stdlib": cf.ProcessPoolExecutor,
}


def submit_and_leave(kind: str, out_dir: str, workers: int, tasks: int,
                     cancel_futures: bool) -> None:
    """Submit ``tasks`` calls that each write a file into ``out_dir``, shut the executor
    down without waiting, and drop it (the function returns): what becomes of the work is
    up to the interpreter's exit. A worker is ready first, so that a task is running when
    ``cancel_futures`` cancels the queued ones."""
    ex = EXECUTORS[kind](workers)
    ex.submit(os.getpid).result(60)  # a worker is ready: it takes the first tasks at once
    for i in range(tasks):
        ex.submit(sleep_then_write, os.path.join(out_dir, f"task-{i}"), 0.3)
    ex.shutdown(wait=False, cancel_futures=cancel_futures)


if __name__ == "__main__":
    # python futures_helpers.py KIND OUT_DIR WORKERS TASKS CANCEL(0/1)
    submit_and_leave(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]),
                     sys.argv[5] == "1")
