"""A pool's crash handling on the local backend alone: a task that kills its workers names
each attempt's exit, even when the backend reports the exits late (a backend written for
the test); a worker of a job of several that sends its job a malformed message. See
fiber/testing/conformance/test_pool_crash.py for what every backend runs."""

from __future__ import annotations

import functools
import os
import socket
import time

import pytest

import fiber
from fiber.backends import Backend, JobState, JobStatus, register_backend
from fiber.backends.local import LocalBackend
from fiber.errors import WorkerLostError
from fiber.testing.conformance.support import pool_helpers as ph


class _LateReports(LocalBackend):
    """A cluster that reports a job's end 3 s after it happened, as Kubernetes may: the
    worker's connection closes long before its exit code is known."""

    name = "late-reports"
    LATE = 3.0

    def __init__(self) -> None:
        super().__init__()
        self._ended: dict = {}

    def watcher(self):
        return Backend.watcher(self)  # the generic watcher, which polls status()

    def status(self, handles):
        out = super().status(handles)
        now = time.monotonic()
        for job_id, st in out.items():
            if st.state.finished and now - self._ended.setdefault(job_id, now) < self.LATE:
                out[job_id] = JobStatus(JobState.RUNNING)
        return out


def test_a_task_that_kills_its_workers_names_each_exit_even_when_reported_late():
    """The error of a task that killed its worker too often names the exit code of each
    attempt, however late the backend reports it (it named only the last one's, after
    waiting 2 s for it while holding the hub's lock: on Kubernetes the first one was
    'still running or unknown')."""
    register_backend("late-reports", _LateReports)
    with fiber.config.override(pool_max_task_retries=1):
        with fiber.get_context("late-reports").Pool(1) as pool:
            r = pool.apply_async(ph.crash_target, (ph.RunFault("exit"),))
            with pytest.raises(WorkerLostError) as info:
                r.get(timeout=60)
            attempts = [ln for ln in str(info.value).splitlines() if "attempt" in ln]
            assert len(attempts) == 2, str(info.value)
            assert all(f"exit code {ph.EXIT_CODE}" in ln for ln in attempts), str(info.value)
            assert pool.apply_async(ph.square, (3,)).get(timeout=60) == 9


def _garble_the_link_once(x: int, marker: str) -> int:
    """Task 3's first attempt writes bytes that are no message on its worker's end of
    the pair with its job, as a bug in fiber would, then returns; every other call
    returns at once. That end is the newest unnamed Unix socket the worker has (the
    other is its job's connection to the master, inherited and opened before it)."""
    if x == 3:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return x * x
        unnamed = []
        for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
            try:
                sock = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue  # not a socket
            with sock:
                if sock.family == socket.AF_UNIX and not sock.getpeername():
                    unnamed.append(fd)
        with socket.socket(fileno=os.dup(unnamed[-1])) as sock:
            sock.sendall(b"\xff" * 64)  # a frame count no message has
        time.sleep(0.5)
    return x * x


def test_a_worker_that_sends_its_job_a_malformed_message_is_ended_and_its_task_rerun(
        tmp_path, capfd):
    """The job closes that worker's link (it stopped reading it: the worker, holding a
    task, would otherwise wait for the next one for ever, and so would the map); the
    worker ends, its task runs again on another worker, every result once."""
    marker = str(tmp_path / "garbled")
    with fiber.Pool(2, workers_per_job=2) as pool:
        result = pool.map_async(functools.partial(_garble_the_link_once, marker=marker),
                                range(8), 1)
        assert result.get(timeout=60) == [x * x for x in range(8)]
        assert os.path.exists(marker)
        assert pool.status().retried == 1
    assert "sent its job a malformed message" in capfd.readouterr().err
