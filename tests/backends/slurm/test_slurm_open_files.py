"""A Slurm pool's jobs cost this process three descriptors each, not a local job's nine.

fiber checks, before it starts jobs, that they fit under the open-file limit
(fiber.process._limits): it counted nine descriptors a job for every backend, what a
local job costs (a pidfd, output pipes, its anchor's end while handed over), and so
refused a Slurm pool of 2,200 workers on a host whose limit is 20,000. A job of a cluster
backend costs its connection and its sentinel pipe (``Backend.files_per_job``). Here a
real Slurm pool runs under a limit that holds three a worker and not nine: the estimate
lets it start, and the real descriptors fit (an ``EMFILE`` would break the pool).
"""

from __future__ import annotations

import os
import resource
from typing import Any

import pytest
from test_slurm import _connected, _wait_for, cluster, slurm  # noqa: F401 - fixtures

import fiber
from fiber.errors import ResourceLimitError
from fiber.process._limits import raise_open_files


def test_a_slurm_pool_fits_a_limit_of_three_files_a_worker(slurm: Any) -> None:  # noqa: F811
    n = 40
    raise_open_files()  # (once a process: not again over the limit set here)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    limit = open_now + 64 + 3 * n + 40  # (64: kept spare; 40: this test's margin)
    assert open_now + 64 + 9 * n > limit  # a local pool's estimate does not fit
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))  # (the hard one cannot go back)
    try:
        with pytest.raises(ResourceLimitError, match=f"about 9 a job.*limit of {limit}"):
            fiber.get_context("local").Pool(n)
        with fiber.config.override(slurm_partition="wide"), slurm.Pool(n) as pool:
            _wait_for(lambda: _connected(pool) == n, 300, f"{n} workers connected")
            assert pool.map(abs, range(-n, 0), chunksize=1) == list(range(n, 0, -1))
            held = len(os.listdir("/proc/self/fd"))
            assert held <= limit
        print(f"Pool({n}) on Slurm under a limit of {limit} descriptors: {held} open "
              f"({(held - open_now) / n:.1f} a worker more than before it)")
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
