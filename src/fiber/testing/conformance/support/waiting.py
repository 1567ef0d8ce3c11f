"""Waiting in tests, and what a test does when a component it needs is missing."""

from __future__ import annotations

import importlib
import os
import signal
import time
from typing import TYPE_CHECKING, Any, Callable, List, NoReturn

import pytest

if TYPE_CHECKING:
    import types

    import fiber

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unusable(component: str, why: str) -> NoReturn:
    """A component the tests need is missing: skipped by hand, a failure under CI=true
    (CI starts every engine: a test that cannot run there must not pass silently)."""
    if IN_CI:
        raise pytest.fail.Exception(f"{component} is unusable under CI=true: {why}")
    raise pytest.skip.Exception(why)  # pytest.skip(why), in words mypy sees end the function


def require(module: str, extra: str = "test") -> types.ModuleType:
    """``module`` imported; if it cannot be (it is in the ``extra`` of pyproject.toml), the
    test is :func:`unusable`: skipped by hand, a failure under CI=true."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        unusable(module, f"{module} (the {extra} extra) is not installed: {e}")


def wait_until(predicate: Callable[[], bool], timeout: float = 30.0,
               interval: float = 0.02, message: str = "condition") -> None:
    """Poll ``predicate`` until true; fail the test (with thread dumps) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            import faulthandler

            faulthandler.dump_traceback(all_threads=True)
            pytest.fail(f"timed out after {timeout} s waiting for {message}")
        time.sleep(interval)


def hold(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP ``pid`` (a process of this host) and wait until every thread of it is
    stopped. ``kill()`` returns before that: the stop starts only once one of its
    threads runs and takes the signal, and until then, on a loaded machine, another of
    its threads may go on for milliseconds (a queue's lease answered a recall 3 ms after
    ``kill()`` returned)."""
    os.kill(pid, signal.SIGSTOP)

    def stopped() -> bool:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
            states = []
            for tid in tasks:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rpartition(")")[2].split()[0])
        except FileNotFoundError:
            return True  # (it ended: nothing of it runs)
        return all(state in "TtZX" for state in states)  # (Z, X: it ended)

    wait_until(stopped, timeout, 0.001, f"process {pid} stopped by SIGSTOP")


def gone(pid: int) -> bool:
    """Whether the process ``pid`` of this host has ended, as its parent's ``waitpid``
    would see it: reaped, or a zombie whose threads have all ended.

    A zombie first thread is not enough: a process's first thread turns zombie as soon
    as it ends, while its other threads may still be ending, and ``waitpid`` sees the
    process only once they all have (a test that took the first for the second saw
    close() rightly say "still running"). So a zombie counts only once
    ``/proc/PID/task`` holds its first thread alone. (``os.kill(pid, 0)`` answers
    another question: whether the pid is still taken, as a zombie's is until its parent,
    or init for an orphan, reaps it.)

    Only for a pid of this machine (its /proc): not a job's on another host, nor one in
    a container with a PID namespace of its own."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rpartition(")")[2].split()[0]  # (the name may hold spaces)
        return state in ("Z", "X") and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except (FileNotFoundError, ProcessLookupError):  # reaped (meanwhile)
        return True


def recorded_jobs(pool: fiber.Pool[Any]) -> List[fiber.Process]:
    """The pool's job processes, once every live worker's job is recorded (the pool
    records a job once it has started: a quick worker may have connected, even ended a
    map, before)."""
    core = pool._core  # noqa: SLF001 - a test looks inside

    def recorded() -> bool:
        jobs = {id(job.process) for job in list(core.procs.values())}
        return all(id(ws.process) in jobs for ws in core.live_workers())

    wait_until(recorded, 30, message="the pool's jobs recorded")
    return [job.process for job in list(core.procs.values())]
