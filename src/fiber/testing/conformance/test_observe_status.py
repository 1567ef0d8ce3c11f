"""A live view of a running program: ``Pool.status()``, the progress of a
``map_async`` result, a progress bar over ``imap``, and ``fiber top`` (through the
program's hub, with its secret). Run on every backend (``ctx``): the master (this test
process) runs here, where ``fiber top`` finds it, whichever backend runs its workers. The
program file's privacy and ``fiber top``'s errors are in
tests/backends/local/test_observe_status_local.py."""

from __future__ import annotations

import io
import os
import time
from typing import TYPE_CHECKING, List

import pytest

from .support import observe_helpers as oh
from .support.cli import fiber_cli
from .support.waiting import require, wait_until

if TYPE_CHECKING:
    import fiber
    from fiber.pool._status import WorkerStatus

pytestmark = pytest.mark.timeout(240)


def _running(pool: fiber.Pool) -> List[WorkerStatus]:
    return [w for w in pool.status().workers if w.state == "running"]


def test_status_shows_the_running_task_on_the_right_worker(ctx):
    gate, started = ctx.Event(), ctx.Queue()
    with ctx.Pool(2) as pool:
        long = pool.apply_async(oh.report_then_wait, (started, gate))
        name = started.get(timeout=120)  # the worker that runs it says its name
        try:
            wait_until(lambda: _running(pool), 60, message="a running worker")
            time.sleep(0.3)
            [worker] = _running(pool)
            assert worker.name == name
            assert worker.task == "apply(report_then_wait) (task 0)"
            assert worker.running_s is not None and worker.running_s > 0.2
            assert worker.job_id and worker.held == 1 and worker.restarts == 0
            status = pool.status()
            assert status.state == "run" and status.size == 2 and len(status.workers) == 2
            assert (status.pending, status.running, status.done) == (0, 1, 0)
        finally:
            gate.set()
        assert long.get(timeout=60) == name
        assert pool.map(oh.sleep, [0.01] * 6, chunksize=1) == [0.01] * 6
        status = pool.status()
        assert (status.pending, status.running, status.done, status.failed) == (0, 0, 7, 0)
        assert status.tasks_per_s > 0
        assert sum(w.done for w in status.workers) == 7
        # a pool uses each worker once it connects: the second may not have yet (a pod, a
        # loaded host), and then one worker ran all 7 tasks
        wait_until(lambda: all(w.state == "idle" for w in pool.status().workers), 120,
                   message="both workers idle")


def test_status_counts_a_maps_items_not_its_chunks(ctx):
    """A map of 30 items in chunks of 4 is 30 tasks to the user: pool.status() (and fiber
    top) counted its 8 chunks ("pending 7" while the first ran)."""
    gate = ctx.Event()
    with ctx.Pool(1) as pool:
        result = pool.map_async(oh.wait_at, [(i, gate, 1) for i in range(30)], chunksize=4)
        try:
            # item 1 holds the first chunk (items 0-3) on the only worker; 26 items wait
            wait_until(lambda: _running(pool), 120, message="the worker runs the first chunk")
            status = pool.status()
            [worker] = status.workers
            assert worker.task == "map(wait_at) (tasks 0-3)" and worker.held == 4
            assert (status.pending, status.running, status.done) == (26, 4, 0)
        finally:
            gate.set()
        assert result.get(timeout=60) == list(range(30))
        status = pool.status()
        assert (status.pending, status.running, status.done, status.failed) == (0, 0, 30, 0)
        assert status.workers[0].done == 30


def test_map_async_tells_how_many_items_are_done(ctx):
    gate = ctx.Event()
    with ctx.Pool(2) as pool:
        result = pool.map_async(oh.wait_if_last, [(i, gate) for i in range(10)], chunksize=3)
        try:
            assert result.total == 10
            wait_until(lambda: result.completed == 9, 120, message="9 items done")
            time.sleep(0.2)
            assert result.completed == 9 and not result.ready()  # the last chunk waits
        finally:
            gate.set()
        assert result.get(timeout=60) == list(range(10))
        assert result.completed == 10


def test_a_tqdm_progress_bar_over_imap(ctx, monkeypatch):
    tqdm = require("tqdm").tqdm  # in the test extra
    monkeypatch.setattr(tqdm, "monitor_interval", 0)  # no monitor thread of its own
    out = io.StringIO()
    with ctx.Pool(2) as pool:
        bar = tqdm(pool.imap(oh.sleep, [0.01] * 20), total=20, file=out, mininterval=0)
        assert list(bar) == [0.01] * 20
        assert bar.n == 20
        bar.close()
    assert "20/20" in out.getvalue()


def test_fiber_top_shows_this_programs_pool_and_running_task(ctx):
    gate, started = ctx.Event(), ctx.Queue()
    with ctx.Pool(2) as pool:
        pool.apply_async(oh.report_then_wait, (started, gate))
        name = started.get(timeout=120)
        try:
            wait_until(lambda: _running(pool), 60, message="a running worker")
            top = fiber_cli("top", "--once", str(os.getpid()), timeout=60)
        finally:
            gate.set()
    assert top.returncode == 0, top.stderr
    lines = top.stdout.splitlines()
    assert lines[0].startswith(f"fiber top — program {os.getpid()} ")
    rows = [line.split() for line in lines if line.strip().startswith(name + " ")]
    assert rows and rows[0][3] == "running", top.stdout  # the worker, its state, its task
    assert "apply(report_then_wait) (task 0)" in top.stdout
