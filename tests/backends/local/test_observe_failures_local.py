"""Failures are never silent (issue 19), as a whole program shows them: a normal shutdown
says nothing, also with FIBER_DEBUG=1, and a program that configured no logging has the
lost worker's warning on its stderr. Programs run as subprocesses on the local backend; the
API tests (``ctx``) are in tests/api/test_observe_failures.py."""

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
