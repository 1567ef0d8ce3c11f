"""fiber.Pool with jobs of several workers (``workers_per_job``), on the backend under
test: each job forks its workers and replaces one that dies in it, without asking the
cluster; a job that dies loses its workers at once, their tasks run elsewhere, once.

The jobs of two workers here ask for ``cpu=0.25`` a worker (half a CPU a job), so that they
fit the test engines' nodes (two CPUs; a Kubernetes node keeps some for itself)."""

from __future__ import annotations

import collections
import functools
import os
import signal
import threading
import time
from typing import List

import numpy as np
import pytest

import fiber
from fiber.errors import BrokenPoolError, ConfigError, WorkerLostError

from .support import pool_helpers as ph
from .support.waiting import gone, hold, recorded_jobs, wait_until
from .test_pool_chaos import INTERVAL, Chaos

pytestmark = pytest.mark.timeout(300)

PER_JOB = 2
CPU = 0.25  # a worker's: a job of two asks for half a CPU


def job_ids(pool) -> collections.Counter:
    """How many live workers each job holds, as ``pool.status()`` shows them."""
    return collections.Counter(w.job_id for w in pool.status().workers)


def test_a_pool_of_jobs_of_two_workers_runs_each_task_once(ctx):
    with ctx.Pool(4, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=240)
        assert len(recorded_jobs(pool)) == 2  # four workers, two cluster jobs
        status = pool.status()
        assert sorted(w.name for w in status.workers) == [f"PoolWorker-{i}" for i in range(1, 5)]
        assert sorted(job_ids(pool).values()) == [2, 2]
        out = pool.map(ph.sleep_then_key, range(400), 1)
        assert [x for x, _ in out] == list(range(400))
        assert len({key for _, key in out}) == 4  # four processes, each its own worker
        assert pool.apply(ph.in_worker) is True
        # the master holds one connection a job: the workers' messages come through it
        service = pool._core.service
        assert len(service.relays) == 2 and not service.by_peer


def test_tasks_of_relayed_workers_use_the_masters_queues_and_locks(ctx):
    queue, lock, event = ctx.Queue(), ctx.Lock(), ctx.Event()
    event.set()
    for i in range(40):
        queue.put(1000 * i)
    with ctx.Pool(4, workers_per_job=PER_JOB, cpu=CPU) as pool:
        task = functools.partial(ph.use_master_objects, queue=queue, lock=lock, event=event)
        out = pool.map_async(task, range(40), 1).get(timeout=120)
    assert sorted(v - v % 1000 for v in out) == [1000 * i for i in range(40)]
    assert sorted(v % 1000 for v in out) == list(range(40))


@pytest.mark.parametrize("per_job", [1, PER_JOB])
def test_more_functions_than_a_worker_keeps(ctx, per_job):
    """Forty functions (a worker keeps 32, the least recently used out): the master, the
    job and the worker must drop the same one, or a task names a function its worker
    no longer has. Each is called once, again in reverse, and again in order."""
    functions = [functools.partial(ph.add, k) for k in range(40)]
    with ctx.Pool(2, workers_per_job=per_job, cpu=CPU) as pool:
        for order in (range(40), reversed(range(40)), range(40)):
            for k in order:
                assert pool.apply(functions[k], (1000,)) == 1000 + k
        assert pool.map(functions[3], range(8), 1) == [3 + x for x in range(8)]
        status = pool.status()  # (a worker missing a function would die: replaced, its
        assert status.retried == 0  # task run again, the results still right)
        assert sum(w.restarts for w in status.workers) == 0


def test_a_worker_that_dies_in_its_job_is_replaced_in_it(ctx):
    with fiber.config.override(pool_max_task_retries=1), \
            ctx.Pool(4, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=240)
        jobs = recorded_jobs(pool)
        before = job_ids(pool)
        # the task ends its worker's process each time: tried twice, then it fails
        with pytest.raises(WorkerLostError):
            pool.apply(ph.do_fault, ("exit", "running the task"))
        pool.wait_until_workers_up(timeout=60)
        now = recorded_jobs(pool)
        assert now == jobs and all(job.is_alive() for job in jobs), (
            f"jobs before: {jobs}, now: {now}; workers: "
            + "; ".join(f"{w.name} job {w.job_id} {w.state} restarts {w.restarts}"
                        for w in pool.status().workers))
        assert job_ids(pool) == before  # replaced in the same jobs, no new job
        assert sum(w.restarts for w in pool.status().workers) == 2
        assert pool.map(ph.square, range(50)) == [x * x for x in range(50)]


def test_large_tasks_and_results_pass_the_relay_both_ways_at_once(ctx):
    """Quick tasks are handed ahead (prefetch): the job writes a worker its next 4 MB
    task while the worker writes it its last 4 MB result. The job's writes to a worker
    never block (they hung both, for ever)."""
    arrays = [np.full(2**19, float(i)) for i in range(24)]
    with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
        out = pool.map_async(ph.negate, arrays, 1).get(timeout=120)
    assert [float(a[0]) for a in out] == [-float(i) for i in range(24)]
    assert all(a.shape == (2**19,) for a in out)


def test_workers_past_maxtasksperchild_are_replaced_in_their_job(ctx):
    with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU, maxtasksperchild=3) as pool:
        out = pool.map(ph.with_process_key, range(30), 1)
        assert [x for x, _ in out] == list(range(30))
        assert len({key for _, key in out}) >= 10  # a new worker every 3 tasks
        (job,) = recorded_jobs(pool)  # all forked by the one job
        assert job.is_alive()


def test_after_close_a_job_forks_no_worker_that_would_be_stopped_at_once(ctx):
    """Closed, with one long task left and nothing queued, the idle workers stop: none
    is forked in their place (it would be stopped at once, and again, while the task
    runs). (The task is held by the job as a whole, see fiber.pool._jobs: its workers
    stop once it is done.)"""
    with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=240)
        long = pool.apply_async(ph.sleep_return, ("done", 2.0))
        service = pool._core.service
        wait_until(lambda: any(ws.pending for ws in [*pool._core.live_workers(),
                                                     *service.holders.values()]), 60,
                   message="a worker runs the long task")
        pool.close()  # the other, idle, stops
        assert long.get(timeout=60) == "done"
        pool.join()
        assert next(pool._core._worker_ids) == 3  # workers 1 and 2, and no other


def test_a_pool_of_jobs_grows_and_shrinks(ctx):
    with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=240)
        pool.resize(5)  # three more workers: two more jobs (of 2 and of 1)
        pool.wait_until_workers_up(timeout=240)
        assert len(pool.status().workers) == 5 and len(recorded_jobs(pool)) == 3
        assert pool.map(ph.square, range(100)) == [x * x for x in range(100)]
        pool.resize(1)
        wait_until(lambda: len(pool.status().workers) == 1, 60, message="shrunk to 1")
        assert pool.map(ph.square, range(20)) == [x * x for x in range(20)]
        time.sleep(1.0)  # a job whose workers all retired has ended, none replaced
        assert len(pool.status().workers) == 1


def test_an_initializer_that_raises_breaks_a_pool_of_jobs(ctx):
    with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU, initializer=ph.init_raises,
                  initargs=("no way",)) as pool:
        with pytest.raises(BrokenPoolError, match="no way"):
            pool.map(ph.square, range(4))


@pytest.mark.parametrize("bad", [-1, True, 2.0, "2"])
def test_a_bad_workers_per_job_is_refused(ctx, bad):
    with pytest.raises(ValueError, match="workers_per_job"):
        ctx.Pool(2, workers_per_job=bad)


def test_a_bad_pool_workers_per_job_in_the_config_is_refused(ctx):
    with pytest.raises(ConfigError, match="pool_workers_per_job"):
        with fiber.config.override(pool_workers_per_job=-1):
            pass


# -- faults, by pid: the local backends ------------------------------------------------


def _workers_of(job_pid: int) -> List[int]:
    try:
        with open(f"/proc/{job_pid}/task/{job_pid}/children") as f:
            return [int(pid) for pid in f.read().split()]
    except OSError:
        return []


class JobChaos(Chaos):
    """Every ``INTERVAL`` s, SIGKILL a random worker inside a job, or (one time in three)
    a whole job with its workers."""

    def __init__(self, pool) -> None:
        super().__init__(pool)
        self.workers_killed = 0
        self.jobs_killed = 0

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            # what the pool holds now (recorded_jobs would wait for the lost ones' workers)
            jobs = [job.process.pid for job in list(self.pool._core.procs.values())
                    if job.process.pid]
            if not jobs:
                continue
            job = self._rng.choice(jobs)
            workers = _workers_of(job)
            kill_job = self._rng.random() < 1 / 3 or not workers
            try:
                os.kill(job if kill_job else self._rng.choice(workers), signal.SIGKILL)
            except ProcessLookupError:
                continue
            if kill_job:
                self.jobs_killed += 1
            else:
                self.workers_killed += 1


@pytest.mark.local_pids
def test_a_map_while_workers_and_whole_jobs_are_killed(ctx):
    n = 10_000
    with fiber.config.override(pool_max_task_retries=50), \
            ctx.Pool(4, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=120)
        with JobChaos(pool) as chaos:
            out = pool.map_async(ph.tiny, range(n), 1).get(timeout=240)
        assert out == [x * 3 + 1 for x in range(n)]  # every result, once, in its place
        assert chaos.workers_killed >= 3 and chaos.jobs_killed >= 2, (
            chaos.workers_killed, chaos.jobs_killed)
        assert pool.map(ph.square, range(20)) == [x * x for x in range(20)]
        pool.wait_until_workers_up(timeout=60)
        assert len(pool.status().workers) == 4


@pytest.mark.local_pids
def test_terminate_ends_every_worker_of_every_job(ctx):
    pool = ctx.Pool(4, workers_per_job=PER_JOB, cpu=CPU)
    pool.wait_until_workers_up(timeout=120)
    pids = {pid for _, pid in pool.map(ph.sleep_then_pid, range(40), 1)}
    jobs = [p.pid for p in recorded_jobs(pool)]
    assert len(pids) == 4 and not pids & set(jobs)
    pool.terminate()
    for pid in pids | set(jobs):
        wait_until(lambda pid=pid: not os.path.exists(f"/proc/{pid}")
                   or open(f"/proc/{pid}/stat").read().split()[2] == "Z",
                   30, message=f"process {pid} ended")


@pytest.mark.local_pids
def test_a_closed_pool_stops_the_workers_of_a_job_the_last_task_skips(ctx):
    """After ``close()``, two workers of a job answer in one message while one task is
    left: one is given it, and the other, left idle, is stopped, so that ``join()``
    returns. (It was stopped only if it was done before the task was handed out: the
    one left idle waited for ever.) The job is held (SIGSTOP) while its two workers'
    tasks end, so that it relays their results in one message when it goes on."""
    for _ in range(3):
        with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
            pool.map(ph.square, range(4))  # both connected
            (job,) = recorded_jobs(pool)
            end = time.time() + 0.5
            result = pool.starmap_async(ph.sleep_until, [(0, end), (1, end), (2, 0.0)],
                                        chunksize=1)
            pool.close()
            time.sleep(0.3)  # the two tasks handed out, the third queued
            hold(job.pid)
            time.sleep(max(0.0, end - time.time()) + 0.3)  # both results wait for it
            os.kill(job.pid, signal.SIGCONT)
            joined = threading.Thread(target=pool.join, daemon=True)
            joined.start()
            joined.join(60)
            assert not joined.is_alive(), "join() waited for a worker nobody stopped"
            assert result.get(5) == [0, 1, 2]


@pytest.mark.local_pids
def test_a_job_told_to_go_retires_its_workers_and_loses_no_task(ctx, caplog):
    caplog.set_level("INFO", logger="fiber")
    with ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=120)
        (job,) = recorded_jobs(pool)
        r = pool.starmap_async(ph.sleep_return, [(x, 0.05) for x in range(60)], 1)
        time.sleep(0.5)
        os.kill(job.pid, signal.SIGTERM)  # a walltime's notice: to the job's process
        assert r.get(timeout=120) == list(range(60))
        wait_until(lambda: not job.is_alive(), 30, message="the job ended")
        said = [rec.getMessage() for rec in caplog.records if rec.name == "fiber"]
        assert sum("retires" in m for m in said) == 2, said
        assert not any("was lost" in m for m in said), said


@pytest.mark.local_pids
def test_a_worker_killed_while_its_job_queues_tasks_it_never_handed_out(ctx):
    """A job is handed tasks as a whole and queues them itself (its workers
    hold half the credit each: here 4 of 8 quick tasks, 8 more queued in the job). A
    worker SIGKILLed then: the tasks it held come back to the master (its job names
    them), those the job queued stay the job's and go to its other worker and to the
    one forked in its place. Every result once, in its place; none lost."""
    n = 4000
    with fiber.config.override(pool_prefetch=7, pool_max_task_retries=50), \
            ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=120)
        (job,) = recorded_jobs(pool)
        (holder,) = pool._core.service.holders.values()
        result = pool.map_async(ph.tiny, range(n), 1)
        killed = 0
        for _ in range(3):
            wait_until(lambda: len(holder.pending) > 2 * 4, 60,
                       message="the job holds more tasks than its workers")
            workers = _workers_of(job.pid)
            if not workers:
                break
            os.kill(workers[0], signal.SIGKILL)
            killed += 1
            time.sleep(0.3)
        assert result.get(timeout=240) == [x * 3 + 1 for x in range(n)]
        assert killed >= 1
        assert job.is_alive()  # replaced in the job, not a new one
        assert pool.map(ph.square, range(20)) == [x * x for x in range(20)]


@pytest.mark.local_pids
def test_a_task_handed_to_a_worker_dead_but_not_reaped_yet_runs_uncharged(ctx):
    """One worker of a job is SIGKILLed; while the master holds the job's answer (the
    hub's lock held here), the other worker is SIGKILLed too, idle, and a task comes:
    the job reads it before it sees that worker's end, and gives it the task (it holds
    none). The task never reached it: it runs on the worker forked in the first one's
    place, charged to no one. It used to be named with the dead worker's end: with
    ``pool_max_task_retries=0``, a task that never ran failed with WorkerLostError."""
    with fiber.config.override(pool_max_task_retries=0), \
            ctx.Pool(2, workers_per_job=PER_JOB, cpu=CPU) as pool:
        pool.wait_until_workers_up(timeout=120)
        (job,) = recorded_jobs(pool)
        first, second = _workers_of(job.pid)
        with pool._core.hub.lock:  # the job's worker_ended waits for its answer
            os.kill(first, signal.SIGKILL)
            wait_until(lambda: not os.path.exists(f"/proc/{first}"), 30,
                       message="the job reaped its first worker")
            os.kill(second, signal.SIGKILL)
            wait_until(lambda: gone(second), 30, message="the second worker ended")
            result = pool.apply_async(ph.square, (7,))  # sent before the answer
        assert result.get(timeout=60) == 49
        assert pool.status().retried == 0
        assert pool.map(ph.square, range(20)) == [x * x for x in range(20)]
