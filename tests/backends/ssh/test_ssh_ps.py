"""``fiber ps -b ssh`` without hosts: what it lists comes from the files of the master's
machine (see fiber/backends/ssh/_jobs.py), read here with a real local process standing
for a job's ssh client."""

from __future__ import annotations

import calendar
import os
import subprocess
import sys
import tempfile
import time

import psutil

from fiber import _machine
from fiber.backends.ssh import _jobs


def test_a_jobs_created_is_when_its_ssh_client_started_not_its_logs_last_write(
        tmp_path, monkeypatch):
    """The hub appends a job's output to its log until its end: the log's last write is
    not when the job was created (``fiber ps`` showed a killed program's jobs created at
    their end)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(_machine.PROGRAM_ENV, "4242")
    client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        log = _jobs.new_log("4242-node1-1", "PoolWorker-1")
        _jobs.note_started(log, "node1", client.pid)
        later = time.time() + 3600  # its output, an hour on
        os.utime(log, (later, later))
        [job] = [j for j in _jobs.find_jobs("4242") if j.job_id == "4242-node1-1"]
        started = psutil.Process(client.pid).create_time()
    finally:
        client.kill()
        client.wait(60)
    assert job.state == "running on node1", job
    created = calendar.timegm(time.strptime(job.created, "%Y-%m-%dT%H:%M:%SZ"))
    assert abs(created - started) <= 2, (job.created, started)
