"""Pools at the sizes users run: 1,024 local workers, and the open-file limit they need.

Behaviour only (results right, nothing on stderr, a clear refusal); how fast they start
and run is measured by benchmarks/scale.py. The cross-host sizes are in
tests/backends/netns (netns hosts) and tests/backends/slurm (a job array).
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from fiber.process._limits import FILES_PER_JOB

SCRIPTS = os.path.join(os.path.dirname(__file__), "scale_scripts")


def _run(script: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "FIBER_BACKEND": "local"})


@pytest.mark.scale
def test_a_pool_of_1024_local_workers_maps_correctly_and_quietly():
    """Pool(1024): every result right and in order, twice, and not a line on stderr
    (before: select() failed on descriptors above 1023, and the pool broke)."""
    out = _run("pool_at_size.py", "1024", "0.5", timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "ok", out.stdout
    assert out.stderr == ""


def test_the_soft_open_file_limit_is_raised_to_the_hard_one():
    """A soft limit of 256 cannot hold 200 workers' connections and sentinels: the
    master raises it to its hard limit, and the pool runs."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.fail(f"this test needs a hard open-file limit of 4096 or more, not {hard}")
    out = _run("open_files.py", "256", "4096", "200", timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok 4096", out.stdout + out.stderr


def test_a_pool_beyond_the_hard_open_file_limit_is_refused_with_the_limit_named():
    out = _run("open_files.py", "300", "300", "200", timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("refused: a pool of 200 workers needs about"), out.stdout
    assert f"(about {FILES_PER_JOB} a job)" in lines[0]
    assert "limit of 300" in lines[0] and "hard limit 300" in lines[0], lines[0]
    assert lines[1] == "running 0", out.stdout


@pytest.mark.scale
def test_a_pool_of_1024_local_workers_loses_none_of_its_results_to_kills(tmp_path):
    """Pool(1024) whose tasks SIGKILL 21 of its workers mid-map, many while the pool still
    starts: every result comes back once and right, and each lost worker is warned of
    once (their anchors are socket pairs handed over at start: their ends must reach the
    hub as a lost worker's connection does)."""
    out = _run("kills_at_size.py", "1024", str(tmp_path), timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["killed 21", "ok"], out.stdout + out.stderr
    lost = [line for line in out.stderr.splitlines() if "was lost: killed by SIGKILL" in line]
    assert len(lost) == 21, out.stderr
