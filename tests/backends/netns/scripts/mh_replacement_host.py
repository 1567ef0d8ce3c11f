"""A pool's workers on the hosts, one of them SIGKILLed and replaced: every line a worker
prints reaches the master prefixed with the worker's netns host (``(PoolWorker-3@fbt7-h3)``),
the replacement's too, also when a job asks for its payload (and says its host) before
its submit returns and the master reads its pipes.

That order is what a submit of many jobs gives its first ones (Pool(48) on three hosts
here); the pool runs on ``netns-late``, netns whose submit returns once each of its jobs
ran the pool's initializer, to have it every time. What a line's host should be comes from
``ip netns identify PID``, not from fiber."""

import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import _common

import fiber
from fiber.backends import register_backend

from fiber_ci import netns


class LateNetnsBackend(netns.NetnsBackend):
    """netns, whose submit returns once each job has run the pool's initializer `mark`."""

    name = "netns-late"
    marks = ""  # the folder `mark` writes to

    def submit(self, specs):
        handles = super().submit(specs)
        for handle in handles:
            path = os.path.join(self.marks, str(handle.pid))
            wait_for(lambda path=path: os.path.exists(path))
        return handles


def mark(marks):
    open(os.path.join(marks, str(os.getpid())), "w").close()


def hello(x):
    print(f"task {x} from {os.getpid()}", flush=True)
    time.sleep(0.05)
    return os.getpid()


def wait_for(predicate, timeout=_common.TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        time.sleep(0.01)


def namespace_of(pid):
    return subprocess.run(["ip", "netns", "identify", str(pid)], capture_output=True,
                          text=True, timeout=30, check=True).stdout.strip()


def main():
    _common.setup()
    LateNetnsBackend.marks = tempfile.mkdtemp(prefix="fiber-marks-")
    register_backend("netns-late", LateNetnsBackend)
    ctx = fiber.get_context("netns-late")
    printed = io.StringIO()  # where the master prints its workers' lines
    sys.stdout = printed
    hosts = {}
    try:
        with ctx.Pool(2, initializer=mark, initargs=(LateNetnsBackend.marks,)) as pool:
            first = set(pool.map(hello, range(4), 1))
            hosts.update({pid: namespace_of(pid) for pid in first})
            victim = min(first)
            os.kill(victim, signal.SIGKILL)
            replacements = set()
            deadline = time.monotonic() + _common.TIMEOUT
            while not replacements and time.monotonic() < deadline:
                replacements = set(pool.map(hello, range(10), 1)) - first
            hosts.update({pid: namespace_of(pid) for pid in replacements})
    finally:
        sys.stdout = sys.__stdout__
        shutil.rmtree(LateNetnsBackend.marks, ignore_errors=True)
    _common.result(lines=printed.getvalue().splitlines(),
                   hosts={str(pid): host for pid, host in hosts.items()},
                   victim=victim, replacements=sorted(replacements))


if __name__ == "__main__":
    main()
