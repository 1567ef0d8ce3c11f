"""Managers on the local backend alone: the class hierarchy, and a program that leaves its
managers to the interpreter's exit."""

from __future__ import annotations

import multiprocessing
import multiprocessing.managers

import pytest

import fiber
from fiber.managers import AsyncManager, BaseManager, SyncManager

import support


def test_async_manager_is_a_base_manager():
    assert issubclass(AsyncManager, BaseManager)
    assert issubclass(SyncManager, BaseManager)
    assert multiprocessing.managers.DictProxy._exposed_ == \
        fiber.managers.DictProxy._exposed_


@pytest.mark.parametrize("mode", ["global", "collected"])
def test_managers_left_to_exit_end_quietly(mode):
    """A program that never shuts its managers down exits with code 0 and a clean stderr:
    the servers are shut down (object jobs first) before fiber's exit function would
    terminate them, which left every object job printing 'parent ... is gone'."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in support.subprocess_env().items() if not k.startswith("FIBER_")}
    cp = subprocess.run([sys.executable, os.path.join(here, "manager_exit_script.py"), mode],
                        capture_output=True, text=True, timeout=120, env=env, cwd=here)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["[1, 2, 3]", "[('a', 1)]"]
    assert cp.stderr == ""
