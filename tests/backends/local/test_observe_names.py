"""Names a person can read (issue 19): ``repr(Process)`` shows the pid, job id, host and
state; a job is titled ``fiber: <name> of <program>`` in ps and top (its comm and its
command line). API tests (``ctx``): local and netns here, the cluster backends in CI."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from fiber.testing.conformance.support import observe_helpers as oh
from fiber.testing.conformance.support.waiting import wait_until

pytestmark = pytest.mark.timeout(240)


def test_repr_shows_pid_job_host_and_state(ctx):
    gate = ctx.Event()
    p = ctx.Process(target=oh.say_then_wait, args=("hi", gate), name="Reprised", daemon=True)
    kind = type(p).__name__  # Process, or the context's (Process_local)
    assert repr(p) == f"<{kind} name='Reprised' parent={os.getpid()} initial daemon>"
    p.start()
    try:
        wait_until(lambda: p.host != "", 120, message="the job to connect")
        text = repr(p)
        found = re.fullmatch(rf"<{kind} name='Reprised' pid=(\d+) parent=(\d+) job=(\S+) "
                             r"host=(\S+) started daemon>", text)
        assert found, text
        assert found.group(2) == str(os.getpid()) and found.group(3) == p.job_id
        assert found.group(4) == p.host
    finally:
        gate.set()
    p.join(60)
    assert repr(p).endswith(f"job={p.job_id} host={p.host} stopped exitcode=0 daemon>")


def test_a_job_is_titled_with_its_name_and_program(ctx):
    out = ctx.SimpleQueue()
    p = ctx.Process(target=oh.own_names, args=(out,), name="Titled-7")
    p.start()
    comm, cmdline = out.get()
    p.join(60)
    assert comm == "Titled-7"
    program = os.path.basename(sys.argv[0])  # python -m pytest: pytest/__main__.py
    if program == "__main__.py":
        program = os.path.basename(os.path.dirname(sys.argv[0]))
    assert cmdline == f"fiber: Titled-7 of {program}"


def test_titles_without_searching_for_libc(tmp_path):
    """A job's title costs no ``ldconfig`` run (``ctypes.util.find_library`` starts one,
    ~5 ms of a thousand workers' start-up each): libc's ``prctl`` comes from the symbols
    the process has loaded. Checked in a new interpreter where finding a library fails."""
    probe = ("import ctypes.util, sys\n"
             "def refuse(name):\n"
             "    raise RuntimeError('find_library called')\n"
             "ctypes.util.find_library = refuse\n"
             "from fiber.process import _title\n"
             "_title.set_title('fiber: Probe-1 of probe.py', 'Probe-1')\n"
             "print(open('/proc/self/comm').read().strip())\n"
             "print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[0].decode())\n")
    cp = subprocess.run([sys.executable, "-c", probe, "x" * 40], capture_output=True,
                        text=True, timeout=60)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["Probe-1", "fiber: Probe-1 of probe.py"], cp.stdout
