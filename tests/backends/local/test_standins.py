"""The stand-in workers of benchmarks/master_scale.py (fiber_ci.standins): a real
master's pool is served by simulated workers that speak the real protocol, so that the
benchmark's simulation measures the real thing and cannot rot unseen."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from fiber_ci import subprocess_env

SCRIPTS = os.path.join(os.path.dirname(__file__), "scale_scripts")


@pytest.mark.parametrize("per_job, links", [(1, 200), (16, 13)])
def test_standins_serve_a_real_pool_over_tcp_with_exact_results(per_job, links):
    """200 stand-in workers, a job each or in jobs of 16 relayed as fiber.pool._group
    relays them: results exact (a task each, chunks, a call), the master counts 200
    workers connected, over one TCP connection a job from the stand-ins' addresses;
    another function than sleep_for is refused with its reason; every job reports exit
    code 0 at the pool's end; the stand-in processes end with their master."""
    out = subprocess.run([sys.executable, os.path.join(SCRIPTS, "standins_pool.py"), "200",
                          str(per_job)], capture_output=True, text=True, timeout=300,
                         env=subprocess_env())
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[:5] == ["results exact", "connected 200", f"tcp {links}", "refused abs",
                         "exit reports 0"], out.stdout + out.stderr
    assert lines[-1] == "ok"
    assert out.stderr == ""
    pids = [int(p) for p in lines[5].split()[1:]]
    assert len(pids) == 2
    deadline = time.monotonic() + 15
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
              for p in pids):
        assert time.monotonic() < deadline, "a stand-in process outlived its master"
        time.sleep(0.1)
