"""Shared set-up of the multi-host scenario scripts (run by tests/backends/netns/test_multihost.py).

A scenario runs in a fresh interpreter (a process's hub binds once), in the root
namespace, with the hosts of the test's ``Hosts`` passed in ``FIBER_NETNS_HOSTS``. It
prints one line ``RESULT <json>`` that the test checks; anything else is diagnostics.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import fiber

from fiber_ci import netns

#: Seconds any single blocking call of a scenario may wait.
TIMEOUT = 30.0


def setup() -> Any:
    """The hosts the test started; makes netns the backend and the master listen on the
    bridge. ``--listen-host`` in argv sets ``listen_host`` explicitly as well."""
    hosts = netns.current_hosts()
    if hosts is None:
        sys.exit(f"run by tests/backends/netns/test_multihost.py: {netns.HOSTS_ENV} is not set")
    if "--listen-host" in sys.argv:
        fiber.init(backend="netns", listen_host=hosts.root_ip)
    else:  # the netns backend's listen_host() is the bridge address too
        fiber.init(backend="netns")
    return hosts


def result(**values: Any) -> None:
    print("RESULT " + json.dumps(values), flush=True)


def my_ip() -> str:
    """This process's address on the route to its parent (the UDP-connect trick)."""
    parent = os.environ.get("FIBER_PARENT", "tcp://10.202.0.1:9")
    host = parent.split("://", 1)[1].rsplit(":", 1)[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((host, 9))
        return str(s.getsockname()[0])


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def join_all(procs: Any, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))


def reset_host(hosts: Any, i: int, dst: str = "") -> int:
    """Abort every TCP socket of host ``i`` whose peer is the master, or ``dst`` (``ss
    -K`` in its namespace: the kernel's own abort, as a middlebox's reset); how many it
    aborted."""
    cp = subprocess.run([*hosts.exec_prefix(i), "ss", "-K", "dst", dst or hosts.root_ip],
                        capture_output=True, text=True, timeout=30)
    return cp.stdout.count("ESTAB")
