"""Issue 48: every byte between hosts is TLS. A capture on the hosts' bridge (an
``AF_PACKET`` socket, as ``tcpdump`` would take it) while a program sends markers in a
pool's tasks and results, a queue's items and a manager's calls between its master and
jobs on other hosts: with ``tls`` off the markers are on the wire (the capture works),
with ``auto`` (TLS between hosts) none is. And a byte flipped on a host's link (an
on-path writer): taken as sent with ``off``, dropped unread and said with ``auto``, the
worker connecting again.

Needs root (namespaces, a bridge, a packet socket), as the other netns tests."""

from __future__ import annotations

import socket
import threading
from typing import List

import pytest
from test_multihost import _scenario, hosts, run_scenario  # noqa: F401,F811 - the module's fixture

from fiber_ci import netns
from support.hosts import RESUMED, said_lost, start_hosts, stop_hosts

MARKERS = (b"ARGMARK-7f3a9c", b"RESMARK-51d2e0", b"ITEMMARK-c44b1e")
ETH_P_ALL = 0x0003


class Capture:
    """Every frame seen on one interface, from a thread, until `stop`."""

    def __init__(self, interface: str) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind((interface, 0))
        self.sock.settimeout(0.2)
        self.frames: List[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.frames.append(self.sock.recv(65536 + 4096))
            except socket.timeout:
                continue

    def stop(self) -> bytes:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        return b"\n".join(self.frames)


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_markers_cross_the_bridge_in_the_clear_only_with_tls_off(hosts: netns.Hosts,  # noqa: F811
                                                                  mode: str) -> None:
    capture = Capture(hosts.bridge)
    try:
        result = run_scenario(hosts, "mh_tls.py", env={"FIBER_TLS": mode})
    finally:
        seen = capture.stop()
    assert result["pool_ok"] and result["queue_ok"] and result["manager_ok"], result
    assert result["remote_conns"] > 0, result
    assert len(seen) > 10_000, "the capture saw almost nothing: it does not work"
    found = [m.decode() for m in MARKERS if m in seen]
    if mode == "off":
        assert result["remote_tls"] == 0, result
        assert len(found) == len(MARKERS), f"only {found} seen: the capture misses traffic"
    else:
        assert result["remote_tls"] == result["remote_conns"], result
        assert not found, f"{found} crossed the bridge in the clear with tls={mode}"



#: Where host 1's relay flips a byte: this far into the stream of the first connection
#: between host 1 and the master opened after it is armed, in one direction, to reach it.
#: Past the handshakes and the first map's small tasks: inside the data map's tasks (from
#: the master) or results (towards it), 64 KiB of data each.
ALTERED_AT = 128 * 1024
ALTERED = "the stream was altered"


# fiber's machinery and OpenSSL's, not the interpreter's: on the main Python only
@pytest.mark.one_python
@pytest.mark.parametrize("towards", ["host", "bridge"], ids=["to the worker", "to the master"])
@pytest.mark.parametrize("mode", ["off", "auto"])
def test_a_byte_altered_on_the_link_is_taken_in_the_clear_and_dropped_with_tls(
        mode: str, towards: str) -> None:
    """Issue 48: an on-path writer on host 1's link (`Hosts.tamper`) flips one byte of the
    stream between the master and the worker on host 1, once, in a map of 60 tasks whose
    arguments and results are 64 KiB of data (``mh_tamper.py``), towards the worker (a
    task's argument) or towards the master (a result).

    With ``tls`` off the altered byte is taken as sent: the worker computes on the altered
    argument (its digest is wrong), or the master returns the altered result; one byte
    of one result is wrong, and nothing says so. With ``auto`` the record that holds it
    fails its check: nothing of it is unpickled, the side that read it (the worker's
    client, or the master's hub) says so once and ends the connection with a reset
    (RST), and the worker connects again and resumes as after a link's reset (the same
    process: none lost or replaced); the tasks it held run again, every result exact
    and once, the map done within a few seconds."""
    three = start_hosts(3)  # its own: the relay ends with them, before the leak check
    try:
        three.tamper(1, after=ALTERED_AT, towards=towards, peer=three.root_ip)
        r, stderr = _scenario(three, "mh_tamper.py", "60", env={"FIBER_TLS": mode})
        stats = three.shaper_stats(1)
        ips, root = [ip for _, ip in three.hosts], three.root_ip
    finally:
        stop_hosts(three)
    print(f"a byte altered {towards}, tls={mode}: {r}, frames {stats}")
    other = "bridge" if towards == "host" else "host"
    assert stats[towards]["altered"] == 1 and stats[other]["altered"] == 0, stats
    assert r["order"] and r["seconds"] < 10, r
    assert r["hosts"] == ips, r  # host 1's worker took part
    said = [line for line in stderr.splitlines() if ALTERED in line]
    if mode == "off":
        assert len(r["args_altered"]) == (1 if towards == "host" else 0), r
        assert r["bytes_altered"] == 1, r
        assert not said and RESUMED not in stderr, stderr
    else:
        assert r["args_altered"] == [] and r["bytes_altered"] == 0, r
        if towards == "host":  # the worker read it: its line, forwarded by the master
            assert len(said) == 1 and said[0].startswith("(PoolWorker-1@"), stderr
            assert f"closed its connection to tcp://{root}:" in said[0], stderr
        else:
            assert len(said) == 1 and said[0].startswith(f"fiber: tcp://{root}:"), stderr
            assert "closed the connection of process" in said[0], stderr
            assert f" from {ips[0]}: a TLS record failed its check" in said[0], stderr
        assert stderr.count(RESUMED) == 1, stderr
    assert not said_lost(stderr), stderr
    assert r["pids"] == r["pids_before"] == r["pids_after"], r  # none lost or replaced
