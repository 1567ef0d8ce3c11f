"""Issue 45 on the Slurm test cluster: jobs kept off a pool's suspected nodes while others
are left (``JobSpec.avoid_hosts``: ``--exclude``, best effort); and a pool that does not
say how many workers a job holds (``workers_per_job=0``, the default) chooses, from the
size of the cluster's nodes as ``sinfo`` tells it (fiber.pool._sizing): a job a worker
below 64 workers; from 64, as many workers as fit the smallest node by their CPU request.

The test cluster's nodes have 2 CPUs: workers of ``cpu=1/32`` fit 64 to a node, so a
``Pool(128)`` of them is 2 array tasks of 64 workers (each asking for 2 CPUs), where a
job a worker would be 128 records.
"""

from __future__ import annotations

import re
import subprocess
import time
from typing import Any

from test_slurm import _connected, _wait_for, cluster, slurm  # noqa: F401 - fixtures

from fiber.backends import JobSpec, JobState, get_backend


def _smallest_cputot() -> int:
    """The CPUs of the test cluster's smallest node, as ``scontrol`` tells them."""
    out = subprocess.run(["scontrol", "-o", "show", "nodes"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    return min(int(m.group(1)) for m in re.finditer(r"CPUTot=(\d+)", out))


def test_the_backend_knows_the_size_of_the_nodes(slurm: Any) -> None:  # noqa: F811
    assert get_backend("slurm").node_cpus() == _smallest_cputot() == 2


def test_a_large_pool_puts_as_many_workers_in_a_job_as_fit_a_node(slurm: Any  # noqa: F811
                                                                  ) -> None:
    n, cpu = 128, 1 / 32
    with slurm.Pool(n, cpu=cpu) as pool:
        _wait_for(lambda: _connected(pool) == n, 300, f"{n} workers connected")
        assert pool.map(abs, range(-n, 0), chunksize=1) == list(range(n, 0, -1))
        jobs = {w.job_id for w in pool.status().workers}
        assert len(jobs) == 2, jobs  # 2 jobs of 64, not 128 jobs
        arrays = {job.split("_")[0] for job in jobs}
        out = subprocess.run(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(arrays)],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        assert sorted(out.split()) == sorted(jobs), out  # 2 records in Slurm
    with slurm.Pool(4, cpu=cpu) as small:  # below 64 workers: a job a worker
        _wait_for(lambda: _connected(small) == 4, 300, "4 workers connected")
        assert len({w.job_id for w in small.status().workers}) == 4
    print(f"Pool({n}, cpu={cpu:g}) on nodes of 2 CPUs: jobs {sorted(jobs)}")


def _hosts_when_running(backend: Any, handles: Any) -> list:
    deadline = time.monotonic() + 120
    while True:
        states = backend.status(handles)
        if all(states[h.job_id].state == JobState.RUNNING and h.host for h in handles):
            return sorted(h.host for h in handles)
        assert time.monotonic() < deadline, states
        time.sleep(0.3)


def test_a_job_is_kept_off_the_nodes_it_avoids_while_others_are_left(slurm: Any  # noqa: F811
                                                                    ) -> None:
    backend = get_backend("slurm")
    sleeper = JobSpec(command=("sleep", "60"), name="avoider",
                      avoid_hosts=frozenset({"node1", "node2"}))
    handles = backend.submit([sleeper, sleeper])  # one array: both kept off node1, node2
    try:
        assert _hosts_when_running(backend, handles) == ["node3", "node3"]
    finally:
        backend.cancel(handles, force=True)
    everywhere = JobSpec(command=("sleep", "60"), name="avoider",
                         avoid_hosts=frozenset({"node1", "node2", "node3", "elsewhere"}))
    handles = backend.submit([everywhere])  # every node avoided: it runs anyway
    try:
        assert _hosts_when_running(backend, handles)[0] in ("node1", "node2", "node3")
    finally:
        backend.cancel(handles, force=True)
