"""A pool worker that its cluster tells to go retires (issue 29): SIGTERM (or the early
warnings SIGUSR1, SIGUSR2) to a worker mid-map makes it give back the tasks it holds,
finish the one it runs and exit 0, while its replacement starts; no task runs twice, none
is charged a retry, and one INFO line (not a WARNING) says so. ``terminate()`` still ends
workers at once. Real processes, real signals (local backend); the cluster stages send
the clusters' own (tests/backends/slurm, docker, kubernetes)."""

from __future__ import annotations

import os
import signal
import time

import pytest

import fiber
from fiber.testing.conformance.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def _task(x: int, marks: str) -> int:
    """Mark its start (one file per run: a task run twice leaves two), then work."""
    with open(os.path.join(marks, f"{x}-{os.getpid()}-{time.monotonic_ns()}"), "w"):
        pass
    time.sleep(0.3)
    return x * x


def _starts(marks: str) -> dict:
    out: dict = {}
    for name in os.listdir(marks):
        x, pid, _ = name.split("-")
        out.setdefault(int(x), []).append(int(pid))
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR1])
def test_a_worker_told_to_go_retires_and_no_task_pays(tmp_path, caplog, sig):
    marks = str(tmp_path)
    with fiber.config.override(log_level="info"):
        with fiber.Pool(2) as pool:
            result = pool.starmap_async(_task, [(x, marks) for x in range(16)], chunksize=1)
            wait_until(lambda: len(os.listdir(marks)) >= 3, 60, message="tasks to run")
            victim = _starts(marks)[0][0]  # the worker that ran the first task
            os.kill(victim, sig)
            assert result.get(timeout=120) == [x * x for x in range(16)]
            status = pool.status()
    starts = _starts(marks)
    assert sorted(starts) == list(range(16))
    assert all(len(pids) == 1 for pids in starts.values()), starts  # none ran twice
    assert status.retried == 0
    fiber_records = [r for r in caplog.records if r.name == "fiber"]
    said = [r.getMessage() for r in fiber_records if " retires: " in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("PoolWorker-"), said
    assert all(r.levelname == "INFO" for r in fiber_records if " retires: " in r.getMessage())
    assert not [r for r in fiber_records if r.levelname == "WARNING"], fiber_records
    wait_until(lambda: not _alive(victim), 30, message="the retired worker to end")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_terminate_still_ends_workers_at_once(tmp_path):
    with fiber.Pool(2) as pool:
        pool.starmap_async(_task, [(x, str(tmp_path)) for x in range(2)])
        result = pool.apply_async(time.sleep, (60,))
        wait_until(lambda: len(os.listdir(tmp_path)) >= 1, 60, message="a task to run")
        started = time.monotonic()
        pool.terminate()
        assert time.monotonic() - started < 15
        with pytest.raises(fiber.errors.PoolTerminatedError):
            result.get(timeout=5)


def test_workers_are_renewed_at_their_lifetime_and_nothing_is_lost(tmp_path, caplog):
    """pool_worker_lifetime: a replacement starts before a worker retires (so the pool
    keeps its width), spread over time; the map is exact, nothing runs twice."""
    marks = str(tmp_path)
    with fiber.config.override(log_level="info", pool_worker_lifetime=1.5):
        with fiber.Pool(2) as pool:
            got = pool.starmap(_task, [(x, marks) for x in range(30)], chunksize=1)
            status = pool.status()
    assert got == [x * x for x in range(30)]
    starts = _starts(marks)
    assert sorted(starts) == list(range(30))
    assert all(len(pids) == 1 for pids in starts.values()), starts
    assert len({pid for pids in starts.values() for pid in pids}) >= 4  # renewed ones ran
    assert status.retried == 0
    fiber_records = [r for r in caplog.records if r.name == "fiber"]
    renewals = [r for r in fiber_records if " is renewed " in r.getMessage()]
    assert len(renewals) >= 2 and all(r.levelname == "INFO" for r in renewals)
    assert not [r for r in fiber_records if r.levelname == "WARNING"], fiber_records


def _task_in_job(x: int, marks: str) -> int:
    """As `_task`, the mark naming its job's process (the worker's parent) too."""
    name = f"{x}-{os.getpid()}-{os.getppid()}-{time.monotonic_ns()}"
    with open(os.path.join(marks, name), "w"):
        pass
    time.sleep(0.3)
    return x * x


def test_a_job_of_several_is_renewed_as_a_whole(tmp_path, caplog):
    """Jobs of several workers (issue 45) are renewed a job at a time: one new job of as
    many workers takes each old job's place (not a job a worker), one INFO line a job;
    the map is exact and nothing runs twice."""
    marks = str(tmp_path)
    with fiber.config.override(log_level="info", pool_worker_lifetime=1.5):
        with fiber.Pool(4, workers_per_job=2) as pool:
            got = pool.starmap(_task_in_job, [(x, marks) for x in range(60)], chunksize=1)
            status = pool.status()
    assert got == [x * x for x in range(60)]
    runs = [name.split("-") for name in os.listdir(marks)]
    assert sorted(int(x) for x, *_ in runs) == list(range(60)), "a task ran twice or never"
    jobs = {ppid for _, _, ppid, _ in runs}
    workers = {pid for _, pid, _, _ in runs}
    renewals = [r.getMessage() for r in caplog.records
                if r.name == "fiber" and " is renewed " in r.getMessage()]
    assert renewals, "no job was renewed in 4.5 s of lifetimes of 1.5 s"
    assert all(m.startswith("PoolJob-") and "(2 workers)" in m and "takes its place" in m
               for m in renewals), renewals
    assert len(jobs) >= 3  # renewed jobs ran tasks
    # a job a renewal (each of 2 workers), not a job a renewed worker
    assert len(jobs) <= 2 + len(renewals), (jobs, renewals)
    assert len(workers) >= 2 * len(jobs) - 2, (workers, jobs)
    assert status.retried == 0
    assert not [r for r in caplog.records if r.name == "fiber" and r.levelname == "WARNING"]


def _where(x: int) -> tuple:
    time.sleep(0.05)
    return x, os.getpid()


def test_one_worker_of_a_job_told_to_go_leaves_its_siblings_working():
    """SIGTERM to one worker of a job of two (not to the job): it retires and is
    replaced, and its sibling keeps taking tasks. The job used to be marked as ending
    as a whole: the sibling, still counted in the pool's size, idled for good."""
    with fiber.Pool(2, workers_per_job=2) as pool:
        pids = sorted({pid for _, pid in pool.map(_where, range(20), chunksize=1)})
        assert len(pids) == 2
        told, sibling = pids
        os.kill(told, signal.SIGTERM)
        wait_until(lambda: not _alive(told), 60, message="the told worker's exit")
        later = {pid for _, pid in pool.map(_where, range(60), chunksize=1)}
        assert sibling in later and told not in later, (pids, later)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"
