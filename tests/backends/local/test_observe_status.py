"""A live view of a running program (issue 19): ``Pool.status()``, the progress of a
``map_async`` result, a progress bar over ``imap``, and ``fiber top`` (through the
program's hub, with its secret). API tests (``ctx``) run on local and netns here and on
slurm, docker and kubernetes in CI; the master (this test process) runs here, where
``fiber top`` finds it."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import time
from typing import Any

import pytest

from fiber import _machine

from support import observe_helpers as oh
from support.cli_helpers import fiber_cli
from support.waiting import require, wait_until

pytestmark = pytest.mark.timeout(240)


def _running(pool: Any) -> Any:
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
        assert all(w.state == "idle" for w in status.workers)


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


def test_the_program_file_is_private_and_the_hub_wants_the_secret(ctx):
    """fiber top reads the hub's address and the secret from a file of this user's alone;
    a client without the secret is refused by the hub (there is no other way in)."""
    ctx.Pool(1).terminate()  # the hub runs
    [info] = [i for i in _machine.programs() if i["pid"] == os.getpid()]
    path = os.path.join(_machine.user_dir(), "programs", f"{info['program']}.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(_machine.user_dir()).st_mode) == 0o700
    probe = ("from fiber.transport.client import Client\n"
             "from fiber.errors import AuthenticationError\n"
             "try:\n"
             f"    Client({info['address']!r}).request(b'status', b'get', timeout=10)\n"
             "except AuthenticationError as e:\n"
             "    print('refused:', e)\n")
    cp = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                        timeout=60, env={k: v for k, v in os.environ.items()
                                         if k != "FIBER_SECRET"})
    assert cp.stdout.startswith("refused:"), cp.stdout + cp.stderr


def test_fiber_top_says_which_programs_run_when_the_one_asked_does_not():
    cp = fiber_cli("top", "--once", "1", timeout=60)
    assert cp.returncode == 1
    assert "no running fiber program '1'" in cp.stderr
