"""Managers on the local backend alone: the class hierarchy, and the managers example of
``examples/`` run as written."""

from __future__ import annotations

import multiprocessing
import multiprocessing.managers

import fiber
from fiber.managers import AsyncManager, BaseManager, SyncManager

import support


def test_async_manager_is_a_base_manager():
    assert issubclass(AsyncManager, BaseManager)
    assert issubclass(SyncManager, BaseManager)
    assert multiprocessing.managers.DictProxy._exposed_ == \
        fiber.managers.DictProxy._exposed_


def test_remote_envs_example_runs_as_written():
    import os
    import subprocess
    import sys

    root = support.REPO
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    cp = subprocess.run([sys.executable, os.path.join(root, "examples", "remote_envs.py")],
                        capture_output=True, text=True, timeout=120, env=env, cwd=root)
    assert cp.returncode == 0, cp.stderr
    assert "8 environments x 100 steps" in cp.stdout
