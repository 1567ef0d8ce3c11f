"""Failures are never silent: a pool worker lost is one warning, with its exit
and the tasks resubmitted; a task that keeps killing its worker is named; ``sys.exit`` in
a task is reported as what it is. Run on every backend (``ctx``); what is seen of a whole
program (its stderr, a normal shutdown with FIBER_DEBUG=1) is in
tests/backends/local/test_observe_failures_local.py."""

from __future__ import annotations

import functools
import re

import pytest

import fiber
from fiber.errors import RemoteError, WorkerLostError

from .support import observe_helpers as oh
from .support.lost_warnings import LostWarnings

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def warnings(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
             ) -> LostWarnings:
    return LostWarnings(capfd, caplog)


def test_a_worker_killed_mid_map_is_one_warning_naming_it(ctx, warnings):
    flag = ctx.Event()
    with ctx.Pool(2) as pool:
        result = pool.map_async(functools.partial(oh.kill_own_worker_once, flag), range(8),
                                chunksize=1)
        assert result.get(timeout=180) == list(range(8))  # every task, once
        warnings.wait(1)
        status = pool.status()
    lines = warnings.lost()  # the pool's shutdown adds nothing
    assert len(lines) == 1, lines
    line = lines[0]
    # the worker, its job and host, its end as the backend tells it (a cluster manager
    # may name the job's state first, as "<manager> <STATE>: "; the backends' own tests
    # check their words), the task given to another worker
    # task 2, and the next one it was given too if its link was measured slow (a busy
    # node: it is handed a task ahead then, see fiber.pool._credit): task 3, or a later
    # one if the other worker took 3 first. Every task it held is named
    found = re.search(r"(PoolWorker-\d+) \(job (\S+) on (\S+)\) was lost: "
                      r"(?:\w+ [A-Z_]+: )?killed by SIGKILL; "
                      r"resubmitted map\(kill_own_worker_once\) (task 2|tasks 2(?:, [3-7])+)$",
                      line)
    assert found, line
    name, job_id, host = found.group(1, 2, 3)
    assert name not in [w.name for w in status.workers]  # the lost one...
    assert job_id not in [w.job_id for w in status.workers]
    assert [w.restarts for w in status.workers if w.restarts] == [1]  # ...was replaced
    assert host != job_id, line  # its host, not its job's name (a pod's, a container's)
    assert status.retried == len(found.group(4).split(", "))  # each task it held, once
    assert status.done == 8


def test_a_task_that_keeps_killing_its_worker_is_named(ctx, warnings):
    with fiber.config.override(pool_max_task_retries=1):
        with ctx.Pool(1) as pool:
            with pytest.raises(WorkerLostError):
                pool.apply_async(oh.kill_own_worker, (1,)).get(timeout=180)
            warnings.wait(2)
    lines = warnings.lost()
    assert len(lines) == 2, lines
    assert "resubmitted apply(kill_own_worker) task 0" in lines[0]
    assert "apply(kill_own_worker) (task 0) killed its worker 2 times" in lines[1]
    assert "WorkerLostError" in lines[1]


def test_log_level_error_hides_the_warning(ctx, warnings):
    flag = ctx.Event()
    with fiber.config.override(log_level="error"):
        with ctx.Pool(2) as pool:
            assert pool.map(functools.partial(oh.kill_own_worker_once, flag), range(4),
                            chunksize=1) == list(range(4))
            assert flag.is_set()
    # the pool's end waits for every worker's job to end, the lost one's too: its warning
    # would have been said by now
    assert not warnings.lost()


def test_sys_exit_in_a_task_is_an_error_not_an_exit(ctx):
    with ctx.Pool(1) as pool:
        with pytest.raises(RemoteError) as info:
            pool.apply(oh.exit_task, (3,))
        assert "SystemExit" in str(info.value) and "sys.exit(3)" in str(info.value)
        assert "exit_task" in str(info.value.__cause__)  # the remote traceback
        assert pool.apply(oh.sleep, (0,)) == 0  # its worker went on
