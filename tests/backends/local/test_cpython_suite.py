"""CPython's own multiprocessing test suite, run against fiber on the local backend
(`fiber_ci.cpython_suite`, issue 32): at least `FLOORS` of its tests pass.

A floor is the count reached when it was set; raise it as fixes land. It holds for the
Python it was measured on: the suite is the interpreter's own file, so another version
runs other tests (there, the run must only complete). The suite takes 1.5 to 2.5 minutes
on two cores (two classes at a time, each in its own interpreter).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from fiber_ci import subprocess_env

#: (major, minor) -> tests that must pass, of the selection's total on that Python: 215
#: reached on 3.11, 2 of slack for _TestProcess.test_active_children, which fails on a
#: loaded machine. Its child sleeps 0.1 s and the parent then looks for it: a job forked
#: by the local fork server runs its target 3-7 ms after start() returns (a spawn child
#: of multiprocessing 70-85 ms, booting its interpreter first), so a parent that loses
#: the CPU for 0.1 s right after start() finds the child ended, not a fiber bug.
FLOORS = {(3, 11): 213}

pytestmark = pytest.mark.timeout(900)


def test_cpython_multiprocessing_suite_passes_the_floor(tmp_path: Any) -> None:
    out = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-m", "fiber_ci.cpython_suite", "--jobs", "2",
         "--timeout", "90", "--logs", str(tmp_path / "logs"), "--json", str(out)],
        capture_output=True, text=True, timeout=840, stdin=subprocess.DEVNULL,
        env=subprocess_env())
    print(run.stdout)  # the counts and each failing test with its reason
    assert run.returncode == 0, f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
    results = json.loads(out.read_text())
    passed = sum(outcome in ("pass", "xfail") for outcome, _ in results.values())
    assert len(results) > 150, run.stdout  # the selection was found and ran
    floor = FLOORS.get(sys.version_info[:2], 0)
    assert passed >= floor, (
        f"{passed} of {len(results)} CPython tests pass, below the floor {floor}:\n"
        + run.stdout)
