"""Loss and delay on a host's link: `Hosts.shape`, whose userspace relay
(``fiber_ci._shaper``) stands in for netem, which this kernel may lack.

Real namespaces and TCP: an echo server runs in host 1, the test connects to it from the
root namespace through the relay. Needs root (skipped without it, except under CI=true).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, Iterator, Tuple

import pytest

from fiber_ci import _namespaces, netns
from support.hosts import start_hosts, stop_hosts

Addr = Tuple[str, int]

ECHO_SERVER = r"""
import os, socket, sys, threading
s = socket.socket()
s.bind((sys.argv[1], 0))
s.listen(64)
print(s.getsockname()[1], flush=True)
def serve(c):
    with c:
        while True:
            data = c.recv(1 << 16)
            if not data:
                return
            c.sendall(data)
def watch():  # EOF on stdin: the test is over
    sys.stdin.read()
    os._exit(0)
threading.Thread(target=watch, daemon=True).start()
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""


@pytest.fixture(scope="module")
def hosts() -> Iterator[netns.Hosts]:
    h = start_hosts(2)
    try:
        h.shape(1)  # the relay in place (no loss, no delay) before any test's leak check
        yield h
    finally:
        stop_hosts(h)


@pytest.fixture(scope="module")
def echo(hosts: netns.Hosts) -> Iterator[Addr]:
    """The address of an echo server in host 1."""
    server = subprocess.Popen(hosts.exec_prefix(1) + [sys.executable, "-c", ECHO_SERVER,
                                                      hosts.ip(1)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        assert port.isdigit(), "the echo server in host 1 did not start"
        yield hosts.ip(1), int(port)
    finally:
        server.communicate(timeout=10)


@pytest.fixture(autouse=True)
def unshaped(hosts: netns.Hosts) -> Iterator[None]:
    hosts.shape(1)
    yield
    hosts.shape(1)


def round_trip(addr: Addr) -> float:
    """Seconds to connect, send a byte and read its echo."""
    start = time.monotonic()
    with socket.create_connection(addr, timeout=5) as c:
        c.sendall(b"x")
        assert c.recv(1) == b"x"
    return time.monotonic() - start


def totals(stats: Dict[str, Dict[str, int]]) -> Dict[str, int]:
    return {key: stats["host"][key] + stats["bridge"][key] for key in ("forwarded", "dropped")}


def test_delay(hosts: netns.Hosts, echo: Addr) -> None:
    round_trip(echo)  # ARP resolved both ways
    hosts.shape(1, delay_ms=50)
    rtt = round_trip(echo)  # two round trips (SYN, the byte) of 2 x 50 ms
    assert 0.1 <= rtt < 1.0, rtt
    hosts.shape(1, delay_ms=50, towards="host")
    hosts.shape(1, delay_ms=0, towards="bridge")
    assert 0.1 <= round_trip(echo) < 0.2  # each direction has its own delay
    hosts.shape(1)
    rtt = min(round_trip(echo) for _ in range(3))
    assert rtt < 0.02, rtt


def test_loss(hosts: netns.Hosts, echo: Addr) -> None:
    data = os.urandom(4 << 20)
    before = totals(hosts.shaper_stats(1))
    hosts.shape(1, loss=0.05)
    received = hashlib.sha256()
    with socket.create_connection(echo, timeout=30) as c:
        def send() -> None:
            c.sendall(data)
            c.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        n = 0
        while chunk := c.recv(1 << 20):
            received.update(chunk)
            n += len(chunk)
        sender.join(30)
    assert n == len(data) and received.hexdigest() == hashlib.sha256(data).hexdigest()
    after = totals(hosts.shaper_stats(1))
    forwarded = after["forwarded"] - before["forwarded"]
    dropped = after["dropped"] - before["dropped"]
    assert 0.01 <= dropped / forwarded <= 0.15, (dropped, forwarded)


def test_directions(hosts: netns.Hosts, echo: Addr) -> None:
    """``host``: the frames travelling to the host; ``bridge``: those it sends."""
    round_trip(echo)  # ARP resolved both ways
    for towards, other in (("host", "bridge"), ("bridge", "host")):
        before = hosts.shaper_stats(1)
        hosts.shape(1, loss=1.0, towards=towards)
        with pytest.raises(OSError):  # the SYN is lost, or the SYN-ACK
            socket.create_connection(echo, timeout=0.5).close()
        hosts.shape(1)
        after = hosts.shaper_stats(1)
        assert after[towards]["dropped"] > before[towards]["dropped"], towards
        assert after[other]["dropped"] == before[other]["dropped"], towards
        if towards == "bridge":  # the SYNs reached the host
            assert after["host"]["forwarded"] > before["host"]["forwarded"]


def test_cut_by_loss(hosts: netns.Hosts, echo: Addr) -> None:
    with socket.create_connection(echo, timeout=15) as kept:
        kept.sendall(b"before")
        assert kept.recv(16) == b"before"
        cut = time.monotonic()
        hosts.shape(1, loss=1.0)
        kept.sendall(b"during")
        with pytest.raises(OSError):  # socket.timeout is one
            socket.create_connection(echo, timeout=2).close()
        time.sleep(max(0.0, cut + 3 - time.monotonic()))
        hosts.shape(1, loss=0.0)
        assert kept.recv(16) == b"during"  # retransmitted once the cut ends
    assert round_trip(echo) < 5


def test_partition_while_shaped(hosts: netns.Hosts, echo: Addr) -> None:
    hosts.partition(1)
    try:
        with pytest.raises(OSError):
            socket.create_connection(echo, timeout=1).close()
    finally:
        hosts.partition(1, on=False)
    assert round_trip(echo) < 5


def test_settings_checked(hosts: netns.Hosts) -> None:
    for bad in ({"loss": 1.5}, {"loss": -0.1}, {"delay_ms": -1}, {"towards": "up"}):
        with pytest.raises(ValueError):
            hosts.shape(1, **bad)  # type: ignore[arg-type]
    assert hosts.shaper_stats(1)["host"]["queued"] == 0
    with pytest.raises(RuntimeError, match="not shaped"):
        hosts.shaper_stats(2)


def test_stop_removes_the_relay() -> None:
    hosts = start_hosts(1)
    try:
        k = hosts.index
        hosts.shape(1, delay_ms=1)
        pid = hosts._shapers[1].pid
        assert {f"fbt{k}s1", f"fbt{k}r1"} <= set(_namespaces.ours(k)[1][k])  # cleanup finds them
        assert round_trip_to_root(hosts) < 1
    finally:
        hosts.stop()
    links = [name for name in _namespaces.names_of_links() if re.match(rf"fbt{k}[sr]\d+$", name)]
    assert not links
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_bridge_keeps_its_address_as_ports_leave_it() -> None:
    """A port leaving the bridge (a pod's, a container's that ended; the relay's of a
    shaped host) must not change the bridge's MAC: the other hosts' ARP entries for it would
    point at nothing for ~30 s, and their connections through it stall (fiber counts
    their jobs lost: the Kubernetes CI saw it)."""
    hosts = start_hosts(2)
    try:
        # host 1's port the lowest MAC: a bridge that follows its ports takes it
        subprocess.run(["ip", "link", "set", hosts.veth(1), "address", "02:00:00:00:00:01"],
                       check=True)
        before = _address(hosts.bridge)
        assert round_trip_to_root(hosts, 2) < 1  # host 2 knows the bridge's MAC now
        subprocess.run(["ip", "link", "set", hosts.veth(1), "nomaster"], check=True)
        assert _address(hosts.bridge) == before  # host 1's port left the bridge
        assert round_trip_to_root(hosts, 2) < 1
    finally:
        stop_hosts(hosts)


def _address(link: str) -> str:
    with open(f"/sys/class/net/{link}/address") as f:
        return f.read().strip()


def round_trip_to_root(hosts: netns.Hosts, i: int = 1) -> float:
    """Seconds for host ``i`` to connect to a listener of the root namespace (through the
    relay, if its link is shaped)."""
    with socket.socket() as listener:
        listener.bind((hosts.root_ip, 0))
        listener.listen(1)
        start = time.monotonic()
        subprocess.run(hosts.exec_prefix(i) + [
            sys.executable, "-c", "import socket, sys; socket.create_connection("
            "(sys.argv[1], int(sys.argv[2])), timeout=5).close()",
            hosts.root_ip, str(listener.getsockname()[1])], check=True, timeout=30)
        listener.accept()[0].close()
        return time.monotonic() - start
