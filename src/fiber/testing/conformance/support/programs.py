"""Running a whole program (an example, a documented program) in a test, with a deadline.

A program that hangs must say where: on a timeout, the leaves of its process tree (its
jobs on this host, their workers) and then the program itself get SIGABRT, which
faulthandler (``PYTHONFAULTHANDLER=1``) turns into a dump of every thread on its stderr.
The leaves go first, while the program still forwards what its jobs write, and alone: a
fork server between them would take its jobs with it before they dumped. Then the whole
process group is killed, and the test fails with both outputs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from typing import Dict, List, Optional

import psutil
import pytest

__all__ = ["run_program"]

DUMP_WAIT_S = 5  # for the dumps to be written (and forwarded) after SIGABRT


def run_program(argv: List[str], timeout: float, cwd: Optional[str] = None,
                env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end within ``timeout`` seconds, its output captured; on a
    timeout, the test fails with every process's threads (see the module)."""
    env = {**(os.environ if env is None else env), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _abort_leaves(proc.pid)
        proc.send_signal(signal.SIGABRT)
        try:
            out, err = proc.communicate(timeout=DUMP_WAIT_S * 2)
        finally:
            _kill_group(proc)
        pytest.fail(f"{' '.join(argv)} did not end within {timeout} s (each process's "
                    f"threads are in its stderr)\n--- stdout\n{out}\n--- stderr\n{err}")
    finally:
        _kill_group(proc)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _abort_leaves(pid: int) -> None:
    """SIGABRT to every descendant of ``pid`` that has no child of its own; then a wait
    for their dumps to reach the program."""
    leaves = []
    try:
        for child in psutil.Process(pid).children(recursive=True):
            if not child.children():
                leaves.append(child)
    except psutil.Error:
        pass
    for leaf in leaves:
        try:
            leaf.send_signal(signal.SIGABRT)
        except psutil.Error:
            pass
    if leaves:
        time.sleep(DUMP_WAIT_S)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """End whatever the program left in its process group (its jobs, a fork server)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
