"""Issue 48: every byte between hosts is TLS. A capture on the hosts' bridge (an
``AF_PACKET`` socket, as ``tcpdump`` would take it) while a program sends markers in a
pool's tasks and results, a queue's items and a manager's calls between its master and
jobs on other hosts: with ``tls`` off the markers are on the wire (the capture works),
with ``auto`` (TLS between hosts) none is.

Needs root (namespaces, a bridge, a packet socket), as the other netns tests."""

from __future__ import annotations

import socket
import threading
from typing import List

import pytest
from test_multihost import hosts, run_scenario  # noqa: F401,F811 - the module's fixture

from fiber_ci import netns

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
