"""The conformance suite as a backend's author runs it: ``pytest --pyargs
fiber.testing.conformance --fiber-backend NAME`` from a directory of their own, against
the fiber installed here (a wheel in the other Pythons' ``newest`` runs of scripts/test),
with neither this repository's tests/ nor its pytest settings in sight. A few tests only:
their jobs import targets from the package's helpers and from a test module."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

SELECTION = ("test_functions_of_the_test_module or test_child_sees_current_and_parent_process"
             " or test_put_get_between_processes")


def test_the_suite_runs_from_the_installed_package_anywhere(tmp_path: Any) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # a project of its own: no settings
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("FIBER_", "PYTEST_"))}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "--pyargs",
         "fiber.testing.conformance", "--fiber-backend", "local", "-k", SELECTION],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL)
    assert out.returncode == 0, f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert f"rootdir: {tmp_path}" in out.stdout, out.stdout  # not this repository's settings
    assert " 3 passed" in out.stdout, out.stdout
    assert "test_pool_lifecycle.py::test_functions_of_the_test_module PASSED" in out.stdout
