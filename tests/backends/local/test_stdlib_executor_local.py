"""The standard library's own executor and multiprocessing's objects handed to fiber jobs,
on the local backend alone: scripts run as ``__main__`` (with and without the main guard),
and the descriptors handed over through multiprocessing's resource sharer."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from multiprocessing import resource_sharer

import pytest

from fiber._core._served import collecting_handoffs
from fiber.errors import ProcessError
from fiber.process import _fd_handoff
from fiber.testing.conformance.support import stdlib_executor_helpers as h

import support

UNGUARDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stdlib_executor_unguarded.py")


@pytest.fixture(autouse=True)
def stop_resource_sharer():
    """The standard library keeps its resource sharer's thread (which hands descriptors to
    jobs) for the life of the program, as multiprocessing does; the leak check would count
    it, so it is stopped after each test (the next use starts it again)."""
    yield
    resource_sharer.stop(timeout=30)


def test_functions_of_the_main_script_and_its_initializer():
    """A user's script: task and initializer are functions of ``__main__``, the
    initializer's global is seen by the tasks (the job imports the script, as spawn)."""
    out = subprocess.run([sys.executable, h.__file__], capture_output=True, text=True,
                         timeout=240, env=support.subprocess_env())
    assert out.returncode == 0, out.stderr
    assert "results [0, 2, 4, 6, 8, 10] True" in out.stdout, out.stdout + out.stderr


def test_a_script_without_the_main_guard_fails_clearly():
    out = subprocess.run([sys.executable, UNGUARDED],
                         capture_output=True, text=True, timeout=240,
                         env=support.subprocess_env())
    assert out.returncode == 0, out.stderr
    assert "broken" in out.stdout, out.stdout + out.stderr
    assert 'if __name__ == "__main__":' in out.stderr


def test_a_job_that_cannot_reach_the_resource_sharer_fails_clearly():
    r, w = os.pipe()
    try:
        blob = pickle.dumps(_fd_handoff._SharedFd(r))
        resource_sharer.stop(timeout=30)  # as seen from a job on another host: nobody there
        with pytest.raises(ProcessError, match="resource sharer .* parent's host"):
            pickle.loads(blob).detach()
    finally:
        os.close(r)
        os.close(w)


def test_a_descriptor_never_fetched_is_closed_when_the_job_ends():
    r, w = os.pipe()
    with collecting_handoffs() as releases:  # the resource sharer's socket is opened once
        _fd_handoff._SharedFd(r)
    for release in releases:
        release()
    before = len(os.listdir("/proc/self/fd"))
    with collecting_handoffs() as releases:
        shared = _fd_handoff._SharedFd(r)
    assert len(os.listdir("/proc/self/fd")) > before
    for release in releases:  # what the job's end does
        release()
    assert len(os.listdir("/proc/self/fd")) == before
    with pytest.raises(ProcessError):
        shared.detach()
    os.close(r)
    os.close(w)
