"""A closed pool's ``join()`` and the results it leaves: each test is a hang found on a
real pool (the local backend) and provoked here by a delay or a step forced between two
threads, the one stand-in of these tests (on a loaded machine the scheduler does the
same: CI's ssh stage hung on the first). Each fails on the code before its fix."""

from __future__ import annotations

import os
import threading
import time

import pytest

import fiber
from fiber.errors import WorkerLostError
from fiber.pool import _draining, _results, _service

import support


def _second_worker_dies_starting() -> None:
    """An initializer: PoolWorker-2 ends before its hello, once its sibling has said
    its own and their job has been handed tasks (as a failing initializer would, or a
    SIGKILL)."""
    if fiber.current_process().name == "PoolWorker-2":
        time.sleep(1.0)
        os._exit(1)


def _brief(x: int) -> int:
    time.sleep(0.002)  # (quick: the job is given several tasks a worker)
    return x


def test_join_ends_when_the_drain_thread_outlives_the_last_job(monkeypatch) -> None:
    """The maintainer took a live drain thread (``close()`` feeding an ``imap``) for a
    drain still going, so it did not end when the last job ended after the drain's
    wake-up, and waited for ever for a wake-up that was never coming."""
    real = _draining._drain

    def drain_then_linger(*args: object) -> None:
        real(*args)  # queues the rest, lets the idle workers go, wakes the maintainer
        time.sleep(3)  # ... which sees the workers' jobs end while this thread lives

    monkeypatch.setattr(_draining, "_drain", drain_then_linger)
    pool = fiber.Pool(2)
    try:
        it = pool.imap(abs, range(-200, 0))
        first = next(it)
        pool.close()
        assert support.joins_within(pool, 30), "join() still waits 30 s after the pool closed"
        assert sorted([first, *it]) == list(range(1, 201))
    finally:
        pool.terminate()


def test_an_imap_that_a_close_in_another_thread_overtakes_is_refused(monkeypatch) -> None:
    """``close()`` ran in another thread after ``imap()`` had checked the pool and
    before it knew the iterator: nothing drained it, its first window ran, the workers
    were let go, and ``next()`` then queued tasks no worker would take, for ever. It is
    refused now, as an ``imap`` after ``close()``."""
    pool = fiber.Pool(1)
    real = _results.IMapIterator.__init__

    def close_first(self: object, *args: object, **kwargs: object) -> None:
        closer = threading.Thread(target=pool.close)
        closer.start()
        closer.join()
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_results.IMapIterator, "__init__", close_first)
    try:
        with pytest.raises(ValueError, match="Pool not running"):
            it = pool.imap(abs, range(200))
            time.sleep(3)  # (before the fix: its window ran, and the worker was let go)
            assert len([it.next(timeout=10) for _ in range(200)]) == 200
        assert support.joins_within(pool, 30)
    finally:
        pool.terminate()


def test_a_task_failing_for_killing_its_worker_is_owed_by_join(monkeypatch) -> None:
    """A task that killed its worker too often fails once the exit codes it names are
    known (``_give_up`` polls for them); meanwhile it was in no queue and no worker, so
    ``join()`` returned and stopped the callback thread, and its ``error_callback``,
    queued there later, never ran: ``get()`` waited for ever. ``terminate()`` missed it
    too. ``join()`` now waits for it."""
    real = _service.PoolService._give_up
    waited = set()

    def exit_codes_come_later(self: _service.PoolService, task: _service.Task,
                              deadline: float) -> None:
        if task.task_id not in waited:  # (as a cluster's report of a job's end, later)
            waited.add(task.task_id)
            assert self.server is not None
            self.server.call_later(1.0, lambda: exit_codes_come_later(self, task, deadline))
            return
        real(self, task, deadline)

    monkeypatch.setattr(_service.PoolService, "_give_up", exit_codes_come_later)
    said = []
    with fiber.config.override(pool_max_task_retries=0):
        pool = fiber.Pool(1)
        try:
            assert pool.apply_async(abs, (-1,), callback=said.append).get(30) == 1
            r = pool.apply_async(os._exit, (3,), error_callback=said.append)
            pool.close()
            assert support.joins_within(pool, 30)
            with pytest.raises(WorkerLostError):
                r.get(timeout=10)
            assert said[0] == 1 and isinstance(said[1], WorkerLostError)
        finally:
            pool.terminate()


def test_a_worker_of_a_job_that_ends_before_its_hello_leaves_no_task_held() -> None:
    """A job of several spreads its tasks to every worker it forked, also to one still in
    its initializer. That one ended before its hello: the master read the tasks its job
    said it held as none (they are a worker's once it said hello), so the job's record
    held them for ever: with no late copy the map never ended, and with one the job was
    never let go, nor ``join()``. They go back to the queue now, charged to no one."""
    with fiber.config.override(pool_late_factor=0.0):
        pool = fiber.Pool(2, workers_per_job=2, initializer=_second_worker_dies_starting)
        try:
            assert pool.map_async(_brief, range(2000), 1).get(60) == list(range(2000))
            pool.close()
            assert support.joins_within(pool, 30)
        finally:
            pool.terminate()
