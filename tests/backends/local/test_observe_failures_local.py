"""Failures are never silent (issue 19), as a whole program shows them: a normal shutdown
says nothing, also with FIBER_DEBUG=1, and a program that configured no logging has the
lost worker's warning on its stderr. Programs run as subprocesses on the local backend; the
API tests (``ctx``) are in fiber/testing/conformance/test_observe_failures.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(240)


_SHUTDOWN = """
    import fiber
    from fiber.testing.conformance.support import helpers

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


_INIT_FAILS = """
    import fiber

    def init():
        raise RuntimeError("init-boom-" + "26")

    def square(x):
        return x * x

    if __name__ == "__main__":
        with fiber.Pool(2, initializer=init) as pool:
            try:
                pool.apply(square, (3,))
            except fiber.errors.BrokenPoolError as e:
                print("BROKEN", str(e).replace("\\n", "|"))
"""


def test_an_initializer_that_keeps_failing_says_its_traceback_once(tmp_path):
    """Issue 26: each failed worker printed its traceback, and each one's end was a
    warning too. Now: the first failure's traceback once, a count of the workers that
    failed the same way, and BrokenPoolError carrying the traceback."""
    script = tmp_path / "init_fails.py"
    script.write_text(textwrap.dedent(_INIT_FAILS))
    cp = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                        timeout=120, env={k: v for k, v in os.environ.items()
                                          if not k.startswith("FIBER_")})
    assert cp.returncode == 0, cp.stderr
    (broken,) = [line for line in cp.stdout.splitlines() if line.startswith("BROKEN ")]
    found = re.match(r"BROKEN (\d+) workers in a row failed to start: the pool's "
                     r"initializer raised:\|Traceback \(most recent call last\):\|"
                     r"  File .*init_fails.py\", line \d+, in init\|.*"
                     r"RuntimeError: init-boom-26\|$", broken)
    assert found, broken
    err = cp.stderr
    assert err.count("Traceback (most recent call last)") == 1, err
    assert err.count("RuntimeError: init-boom-26") == 1, err
    assert "worker_main" not in err, err  # from the initializer's frame on
    warnings = [line for line in err.splitlines() if " WARNING: " in line]
    # "starting": the worker's batch was still being submitted when it failed
    assert re.search(r"WARNING: PoolWorker-\d \((job \S+ on \S+|starting)\): the pool's "
                     r"initializer raised; the worker exits", warnings[0]), err
    counts = [re.search(r"WARNING: the pool's initializer failed the same way in (\d+) "
                        r"more workers? \(PoolWorker-\d+(, PoolWorker-\d+)*\)", line)
              for line in warnings[1:]]
    assert all(counts) and counts, err  # the rest are counts, no worker's own warning
    assert "the pool is broken (BrokenPoolError)" in warnings[1], err
    assert 1 + sum(int(c.group(1)) for c in counts if c) >= int(found.group(1)), err
