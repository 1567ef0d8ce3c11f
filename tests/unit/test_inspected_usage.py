"""A job on the parent's host is read in /proc by the parent (fiber.process._inspected),
without being woken: its CPU time and resident memory, as its own report would say."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from fiber.process import _inspected
from fiber.process._inspected import _Job, _uptime


def _job(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_job_on_this_host_is_read_in_proc() -> None:
    busy = _job("import time\nt = time.time()\nwhile time.time() - t < 5: pass")
    idle = _job("import time; time.sleep(5)")
    try:
        time.sleep(0.5)
        jobs = [_Job(None, "busy", busy.pid), _Job(None, "idle", idle.pid)]  # type: ignore[arg-type]
        for job in jobs:
            job.read(time.monotonic(), _uptime())  # first: its mean since it started
        time.sleep(1.0)
        for job in jobs:
            job.read(time.monotonic(), _uptime())
        b, i = jobs
        assert b.rss > 1 << 20 and i.rss > 1 << 20
        # (a busy loop on a machine running CI lanes gets a share of a CPU, not all)
        assert b.cpu_percent > 5 and i.cpu_percent < 3, (b.cpu_percent, i.cpu_percent)
    finally:
        for p in (busy, idle):
            p.kill()
            p.wait()
    before = (b.cpu, b.rss, b.at)
    b.read(time.monotonic(), _uptime())  # ended: its last figures stay
    assert (b.cpu, b.rss, b.at) == before


def test_here_tells_this_host_apart() -> None:
    """A child on this host says what its parent says (the parent then reads it)."""
    mine = _inspected.here()
    assert mine and mine.count(b":") == 2
    child = subprocess.run([sys.executable, "-c", "import sys\nfrom fiber.process import "
                            "_inspected\nsys.stdout.buffer.write(_inspected.here())"],
                           capture_output=True, check=True, env=os.environ)
    assert child.stdout == mine
