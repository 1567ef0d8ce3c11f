"""``fiber ps``, ``logs`` and ``stop`` on the local backend (issue 19): this user's fiber
programs on this machine, their jobs and the jobs' own logs (local backend only: the
program is a script run here)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

import fiber
from fiber.testing.conformance.support import observe_helpers as oh
from fiber.testing.conformance.support.waiting import wait_until

from support.cli_helpers import fiber_cli, tagged

pytestmark = pytest.mark.timeout(240)

SCRIPT = os.path.join(os.path.dirname(__file__), "observe_scripts", "chatty_program.py")


def test_ps_logs_and_stop_a_local_program():
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    proc = subprocess.Popen([sys.executable, SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        assert proc.stdout is not None
        seen = []
        while not seen or not seen[-1].startswith("READY ") and seen[-1]:
            seen.append(proc.stdout.readline())  # (the test's timeout bounds it)
        ready = tagged(seen[-1], "READY")
        # the workers' lines reached the program's stdout, prefixed
        assert sorted(x.split(") ", 1)[1] for x in seen if x.startswith("(PoolWorker-")) == [
            f"hello from task {i}\n" for i in range(4)], seen
        program = str(proc.pid)
        ps = fiber_cli("ps", "-b", "local", program)
        assert ps.returncode == 0, ps.stderr
        rows = [r.split() for r in ps.stdout.splitlines()[1:]]
        by_job = {r[0]: r for r in rows}
        assert by_job[program][1] == program and "main:" in ps.stdout  # the program itself
        napper = by_job[ready["job"]]
        assert napper[2:4] == ["running", "(pid"] and napper[-1] == "Napper", ps.stdout
        assert sum(1 for r in rows if r[-1].startswith("PoolWorker-")) == 2, ps.stdout
        # a job's own log: its output, unprefixed
        wait_until(lambda: "napping" in fiber_cli("logs", "-b", "local", ready["job"]).stdout,
                   60, message="the Napper's log")
        worker_logs = [fiber_cli("logs", "-b", "local", r[0]).stdout for r in rows
                       if r[-1].startswith("PoolWorker-")]
        assert sorted(x for log in worker_logs for x in log.splitlines()) == [
            f"hello from task {i}" for i in range(4)]
        stop = fiber_cli("stop", "-b", "local", program)
        assert stop.returncode == 0 and f"program {program}: removed" in stop.stdout, stop
        proc.wait(60)
        assert proc.returncode == -15  # SIGTERM
        # its jobs end with it (their lifeline to it closed)
        wait_until(lambda: not psutil.pid_exists(ready["pid"])
                   or psutil.Process(ready["pid"]).status() == psutil.STATUS_ZOMBIE, 30,
                   message="the program's job to end")
        # listed no more as running: the main process, nor a job (both are kept, and
        # listed with --all: the program killed by the signal, before its exit hooks)
        wait_until(lambda: "running" not in fiber_cli("ps", "-b", "local", "--all",
                                                      program).stdout,
                   30, interval=0.5, message="fiber ps to list the program as ended")
        after = fiber_cli("ps", "-b", "local", "--all", program).stdout
        assert "ended (killed)" in _line_of(after, program) and ready["job"] in after
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _line_of(ps: str, job: str) -> str:
    """The line of ``fiber ps``'s output that lists ``job``."""
    lines = [line for line in ps.splitlines() if line.split()[0] == job]
    assert len(lines) == 1, ps
    return lines[0]


def _sockets(pid: int) -> int:
    fds = f"/proc/{pid}/fd"
    return sum(1 for fd in os.listdir(fds) if os.readlink(os.path.join(fds, fd)).startswith(
        "socket:"))


def test_a_local_job_makes_no_connection_for_its_output(capfd):
    """A local job's output is read by its parent from the job's pipes (see
    fiber.process._captured): a job that prints has no more sockets than one that does
    not (a Pool(1024): no connection and handshake a worker for its output), and its
    line arrives."""
    gate = fiber.Event()
    quiet = fiber.Process(target=oh.say_then_wait, args=("", gate))
    chatty = fiber.Process(target=oh.say_then_wait, args=("lazy-hello", gate))
    quiet.start()
    chatty.start()
    try:
        seen = ""

        def printed() -> bool:
            nonlocal seen
            seen += capfd.readouterr().out
            return "lazy-hello" in seen

        wait_until(printed, 60, message="the chatty job's line")
        wait_until(lambda: _sockets(quiet.pid) > 0, 60, message="the quiet job's anchor")
        assert _sockets(chatty.pid) == _sockets(quiet.pid)
    finally:
        gate.set()
    for p in (quiet, chatty):
        p.join(60)
        assert p.exitcode == 0
