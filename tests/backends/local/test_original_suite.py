"""The original fiber's own tests (``uber/fiber`` 0.2.1's ``tests/``, from its sdist on
PyPI) pass here, their imports of private modules made public (issue 32).

``original_suite.py`` downloads them (never committed: everything in this repository is
written here), lists what it rewrites and what it leaves aside (private modules, Docker)
with reasons, and runs the rest on the local backend. This test fails loudly when they
cannot be obtained (it needs PyPI), and when fewer than ``FLOOR`` pass. What still
differs is in docs/migrating.md, each with its reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

RUNNER = os.path.join(os.path.dirname(__file__), "original_suite.py")
#: Tests of the 54 run that pass (51 at this writing; one below for the error_handling
#: tests' 0.4% chance of a task raising 4 times in a row, as the original's 5% error
#: rate gives).
FLOOR = 50


@pytest.mark.timeout(300)
def test_the_original_fibers_own_tests(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)  # this fiber, as installed here
    done = subprocess.run([sys.executable, RUNNER, "--cache", str(tmp_path / "cache")],
                          env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"the original's tests could not be run:\n{done.stderr}"
    found = re.search(r"original fiber tests: (\d+) passed of (\d+) run", done.stdout)
    assert found, done.stdout[-3000:]
    passed = int(found.group(1))
    # the first ones say where it went wrong (a process one test left running fails the
    # setup of every later one: the original's fixture wants no active children)
    first = [ln for ln in done.stdout.splitlines()
             if ln.startswith(("failure ", "error "))][:8]
    assert passed >= FLOOR, "\n".join(first) + "\n...\n" + done.stdout[-3000:]
