"""Failures are never silent (issue 19): a pool worker lost is one warning, with its exit
and the tasks resubmitted; a task that keeps killing its worker is named; a normal
shutdown says nothing, also with FIBER_DEBUG=1; ``sys.exit`` in a task is reported as
what it is. The API tests run on every backend (``ctx``)."""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess
import sys
import textwrap
import time
from typing import Any, List

import pytest

import fiber
from fiber.errors import RemoteError, WorkerLostError

from support import observe_helpers as oh

pytestmark = pytest.mark.timeout(240)


class _Warnings:
    """fiber's warnings of lost workers, as the test process shows them: on stderr (its
    own handler), or in pytest's log capture (pytest gives the root logger a handler,
    and fiber's records then go to the program's handlers, not to stderr too)."""

    def __init__(self, capfd: Any, caplog: Any) -> None:
        self._capfd, self._caplog = capfd, caplog
        self._err = ""

    def lost(self) -> List[str]:
        self._err += self._capfd.readouterr().err
        lines = [line for line in self._err.splitlines() if " WARNING: " in line]
        lines += [r.getMessage() for r in self._caplog.records
                  if r.name == "fiber" and r.levelno == logging.WARNING]
        return [line for line in lines if " was lost" in line]

    def wait(self, count: int, timeout: float = 30.0) -> List[str]:
        deadline = time.monotonic() + timeout
        while len(self.lost()) < count and time.monotonic() < deadline:
            time.sleep(0.1)
        return self.lost()


@pytest.fixture
def warnings(capfd: Any, caplog: Any) -> _Warnings:
    return _Warnings(capfd, caplog)


def test_a_worker_killed_mid_map_is_one_warning_naming_it(ctx, backend_name, warnings):
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
    found = re.search(r"(PoolWorker-\d+) \(job (\S+)", line)
    assert found, line
    name = found.group(1)
    assert name not in [w.name for w in status.workers]  # the lost one...
    assert [w.restarts for w in status.workers if w.restarts] == [1]  # ...was replaced
    assert "resubmitted map(kill_own_worker_once) task 2" in line
    if backend_name in ("local", "netns"):
        assert "killed by SIGKILL" in line
    assert status.retried == 1 and status.done == 8


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
            time.sleep(1)
    assert not warnings.lost()


def test_sys_exit_in_a_task_is_an_error_not_an_exit(ctx):
    with ctx.Pool(1) as pool:
        with pytest.raises(RemoteError) as info:
            pool.apply(oh.exit_task, (3,))
        assert "SystemExit" in str(info.value) and "sys.exit(3)" in str(info.value)
        assert "exit_task" in str(info.value.__cause__)  # the remote traceback
        assert pool.apply(oh.sleep, (0,)) == 0  # its worker went on


_SHUTDOWN = """
    import fiber
    from support import helpers

    def square(x):
        return x * x

    if __name__ == "__main__":
        with fiber.Pool(2) as pool:          # terminate() at the end of the block
            assert pool.map(square, range(10)) == [x * x for x in range(10)]
        pool = fiber.Pool(2)
        pool.map(square, range(10))
        pool.close()
        pool.join()
        pool = fiber.Pool(2, maxtasksperchild=1)
        pool.map(square, range(4), chunksize=1)
        pool.resize(1)
        p = fiber.Process(target=helpers.noop)
        p.start()
        p.join()
        left = fiber.Pool(1)                  # never closed: ended at exit
        left.map(square, [1])
        print("DONE")
"""


def test_a_normal_shutdown_reads_as_one_with_debug_logging(tmp_path):
    script = tmp_path / "shutdown.py"
    script.write_text(textwrap.dedent(_SHUTDOWN))
    here = os.path.dirname(__file__)
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=120, cwd=here,
                        env={**os.environ, "FIBER_DEBUG": "1", "PYTHONPATH": os.pathsep.join(
                            [here, *sys.path])})
    assert cp.returncode == 0 and "DONE" in cp.stdout, cp.stderr
    log = cp.stderr
    assert "DEBUG: started PoolWorker-1" in log  # debug logging is on
    for word in ("WARNING", " lost", "failed", "Traceback"):
        assert word not in log, f"{word!r} in a normal shutdown's log:\n{log}"
    assert "left the pool (terminated)" in log and "ended as asked" in log


_KILLED = """
    import functools, os, signal, fiber

    def work(flag, x):
        if x == 1 and not flag.is_set():
            flag.set()
            os.kill(os.getpid(), signal.SIGKILL)
        return x

    if __name__ == "__main__":
        flag = fiber.Event()
        with fiber.Pool(2) as pool:
            print(pool.map(functools.partial(work, flag), range(4), chunksize=1))
"""


def test_the_warning_is_on_stderr_by_default(tmp_path):
    """A program that configured no logging: the warning is on its stderr, once, with a
    timestamp and the process's name."""
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(_KILLED))
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=120, env={k: v for k, v in os.environ.items()
                                          if not k.startswith("FIBER_")})
    assert cp.returncode == 0 and cp.stdout.strip() == "[0, 1, 2, 3]", cp.stderr
    lines = [line for line in cp.stderr.splitlines() if "WARNING" in line]
    assert len(lines) == 1, cp.stderr
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} fiber MainProcess\[\d+\] .* "
                    r"WARNING: PoolWorker-\d \(job \d+-\d on .+\) was lost: killed by "
                    r"SIGKILL; resubmitted map\(work\) tasks? 1(, \d)*$", lines[0]), lines[0]
