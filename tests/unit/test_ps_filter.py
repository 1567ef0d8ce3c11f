"""``fiber ps`` lists the jobs that have not ended, and with ``--all`` those that have, on
any backend: each says which of its jobs are over (``JobInfo.ended``) in its own words
(the local backend's in tests/backends/local/test_ps_local.py; Slurm's here, from a
listing as ``squeue`` prints it)."""

from __future__ import annotations

import subprocess
import types
from typing import Any, List

from fiber import cli
from fiber.backends import JobInfo
from fiber.backends.slurm import _jobs as slurm_jobs

JOBS = [JobInfo("1", "p", "main", "running", "2026-01-01T00:00:00Z"),
        JobInfo("2", "p", "worker", "exited (137)", "2026-01-01T00:00:01Z", ended=True),
        JobInfo("3", "q", "worker", "Pending", "2026-01-01T00:00:02Z")]


def _ps(capsys: Any, *argv: str) -> List[str]:
    """The job ids ``fiber ps ARGV`` prints, with a backend that lists JOBS."""
    args = cli._parser().parse_args(["ps", *argv])
    backend = types.SimpleNamespace(
        find_jobs=lambda program="": [j for j in JOBS if not program or j.program == program])
    assert cli._ps(backend, args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["JOB", "PROGRAM", "STATE"]
    return [line.split()[0] for line in lines[1:]]


def test_ps_hides_ended_jobs_unless_all(capsys):
    assert _ps(capsys) == ["1", "3"]
    assert _ps(capsys, "--all") == ["1", "2", "3"]
    assert _ps(capsys, "-a", "p") == ["1", "2"]
    assert _ps(capsys, "p") == ["1"]


def test_slurm_jobs_that_are_over_are_ended():
    states = {"10": "RUNNING", "11": "PENDING", "12": "COMPLETING", "13": "CANCELLED by 0",
              "14": "COMPLETED", "15": "FAILED", "16": "TIMEOUT", "17": "NODE_FAIL"}
    listing = "".join(f"{job}|{state}|2026-01-01T00:00:00|fiber 555 w{job}\n"
                      for job, state in states.items())
    commands = types.SimpleNamespace(
        query_timeout=10.0,
        run_command=lambda argv, **kw: subprocess.CompletedProcess(argv, 0, listing, ""))
    ended = {j.job_id: j.ended for j in slurm_jobs.find_jobs(commands)}
    assert ended == {"10": False, "11": False, "12": False, "13": True, "14": True,
                     "15": True, "16": True, "17": True}
