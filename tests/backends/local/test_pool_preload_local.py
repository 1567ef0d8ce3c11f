"""Issue 45: a job of several workers imports what config ``pool_preload`` names before
it forks them (``auto``: the third-party packages the master has imported), so that its
workers share those modules' memory rather than each importing its own copy; and it
freezes its objects out of their collections (``gc.freeze``), so that they stay shared.
Measured (`fiber._preload`'s docstring): 11.8 MB a worker kept to itself without
the preload, 6.2 MB with it."""

from __future__ import annotations

import gc
import os
import sys
import time

import fiber


def where_imported(_: int):
    """(pid that imported the probe, this worker's pid, its parent's, frozen objects)."""
    from support import preload_probe

    time.sleep(0.02)  # the tasks spread over the workers
    return preload_probe.IMPORTED_IN, os.getpid(), os.getppid(), gc.get_freeze_count()


def _run(preload: str):
    assert "support.preload_probe" not in sys.modules  # the master never imports it
    with fiber.config.override(pool_preload=preload):
        with fiber.Pool(4, workers_per_job=2) as pool:
            return pool.map(where_imported, range(16), chunksize=1)


def test_the_job_imports_what_pool_preload_names_before_it_forks():
    out = _run("no_such_module_of_fiber_tests, support.preload_probe")
    assert len({pid for _, pid, _, _ in out}) >= 2, out
    for imported_in, pid, parent, frozen in out:
        assert imported_in == parent != pid, out  # its job's import, not its own
        assert frozen > 0, out


def test_with_pool_preload_empty_each_worker_imports_its_own():
    out = _run("")
    for imported_in, pid, parent, _ in out:
        assert imported_in == pid != parent, out


def test_auto_names_what_the_master_imported():
    """``auto`` (the default) preloads what the master has imported from site-packages
    when the pool starts: cloudpickle (fiber's dependency) is in the job before its
    workers are forked."""

    with fiber.Pool(2, workers_per_job=2) as pool:
        core = pool._core
        assert "cloudpickle" in core.preload and "fiber" not in core.preload
        assert pool.map(_has_module, ["cloudpickle"]) == [True]


def _has_module(name: str) -> bool:
    return name in sys.modules
