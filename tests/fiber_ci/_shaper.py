"""A userspace link shaper: loss and delay on one netns host's link (root only), for a
kernel without ``sch_netem``; and a byte of a TCP stream flipped (`fiber_ci._tamper`).
Run as ``python -m fiber_ci._shaper INNER OUTER``. Its place and its commands:
docs/contributing/testing.md, "The link shaper"."""

from __future__ import annotations

import collections
import errno
import json
import math
import os
import random
import select
import socket
import subprocess
import sys
import tempfile
import time
from typing import Callable, Deque, Dict, Optional, Sequence, Tuple

from . import subprocess_env
from ._tamper import Tamper

SOL_PACKET = 263
#: Frames carry a virtio-net header, so GSO super-frames and partial checksums (veth
#: offloads both) pass as they are; without it: EMSGSIZE, packets with bad checksums.
PACKET_VNET_HDR = 15
PACKET_OUTGOING = 4  # a frame's pkttype: sent on the interface, not received
ETH_P_ALL = 0x0003
_FRAME_MAX = 65536 + 4096  # a 64 KiB GSO frame, its Ethernet and virtio-net headers
_SOCK_BUF = 8 << 20
_QUEUE_MAX = 64 << 20  # bytes one direction's delay line may hold
_BATCH = 64  # frames read from one socket before the other and the delay lines get a turn
_GONE = (errno.ENXIO, errno.ENODEV)  # our interface was deleted
TOWARDS = ("host", "bridge", "both")


class _Direction:
    """One way through the relay: frames read on ``src`` are sent on ``dst``, each lost with
    probability ``loss``, after ``delay`` s (constant, so the delay line is a FIFO), and
    altered by ``tamper`` if it is set."""

    def __init__(self, src: socket.socket, dst: socket.socket) -> None:
        self.src, self.dst = src, dst
        self.loss = self.delay = 0.0
        self.tamper: Optional[Tamper] = None
        self.queue: Deque[Tuple[float, bytes]] = collections.deque()
        self.queued_bytes = 0
        self.forwarded = self.dropped = self.failed = 0

    def receive(self, view: memoryview, now: float) -> None:
        """Read up to `_BATCH` waiting frames; forward, delay or drop each."""
        for _ in range(_BATCH):
            try:
                n, addr = self.src.recvfrom_into(view)
            except BlockingIOError:
                return
            except OSError as e:  # ENETDOWN (reported once when the link goes down), or
                if e.errno in _GONE:  # a frame whose virtio-net header cannot be made
                    raise
                if e.errno != errno.ENETDOWN:
                    self.failed += 1
                continue
            if addr[2] == PACKET_OUTGOING:
                continue
            if self.loss and random.random() < self.loss:
                self.dropped += 1
                continue
            if self.tamper is not None:  # only frames that go on: a lost one is sent again
                self.tamper.alter(view[:n])
            if self.delay <= 0 and not self.queue:
                self._send(view[:n])
            elif self.queued_bytes + n > _QUEUE_MAX:
                self.failed += 1
            else:
                self.queue.append((now + self.delay, bytes(view[:n])))
                self.queued_bytes += n

    def release(self, now: float) -> float:
        """Send the frames due by ``now``; when the next one is due (inf: none waits)."""
        queue = self.queue
        while queue and queue[0][0] <= now:
            frame = queue.popleft()[1]
            self.queued_bytes -= len(frame)
            self._send(frame)
        return queue[0][0] if queue else math.inf

    def _send(self, frame: bytes | memoryview) -> None:
        try:
            self.dst.send(frame)
            self.forwarded += 1
        except OSError as e:  # ENOBUFS, EAGAIN: the kernel's queue is full; ENETDOWN: the
            if e.errno in _GONE:  # host is partitioned (its veth down)
                raise
            self.failed += 1


def _open(name: str) -> socket.socket:
    """A nonblocking packet socket with virtio-net headers, bound to interface ``name``."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)  # protocol 0: nothing is
    sock.setsockopt(SOL_PACKET, PACKET_VNET_HDR, 1)  # received before bind(), which
    for force, plain in ((33, socket.SO_RCVBUF), (32, socket.SO_SNDBUF)):  # names one
        try:  # SO_RCVBUFFORCE, SO_SNDBUFFORCE (root): past net.core.rmem_max/wmem_max
            sock.setsockopt(socket.SOL_SOCKET, force, _SOCK_BUF)
        except OSError:
            sock.setsockopt(socket.SOL_SOCKET, plain, _SOCK_BUF)
    sock.bind((name, ETH_P_ALL))
    sock.setblocking(False)
    return sock


def _command(line: str, dirs: Dict[str, _Direction]) -> str:
    """The answer to one control line (see the module docstring)."""
    words = line.split()
    if words == ["stats"]:
        return json.dumps({name: {"forwarded": d.forwarded, "dropped": d.dropped,
                                  "failed": d.failed, "queued": len(d.queue),
                                  "altered": d.tamper.altered if d.tamper else 0,
                                  "partial": d.tamper.partial if d.tamper else 0}
                           for name, d in dirs.items()})
    try:
        values = dict(word.split("=", 1) for word in words[2:])
        if words[0] == "set":
            loss, delay_ms = float(values.pop("loss")), float(values.pop("delay_ms"))
            settings(words[1], loss, delay_ms)
        else:
            after, connections = int(values.pop("after")), int(values.pop("connections"))
            peer = values.pop("peer", None)
            tampering(words[1], after, connections, peer)
        if words[0] not in ("set", "tamper") or values:
            raise ValueError(values)
    except (ValueError, KeyError, IndexError):
        return (f"ERROR {line.strip()!r}: expected `stats`, "
                "`set host|bridge|both loss=<0..1> delay_ms=<ms>` or "
                "`tamper host|bridge|both after=<bytes> connections=<n> [peer=<ipv4>]`")
    for name in (("host", "bridge") if words[1] == "both" else (words[1],)):
        if words[0] == "set":
            dirs[name].loss, dirs[name].delay = loss, delay_ms / 1e3
        else:
            dirs[name].tamper = Tamper(after, connections, peer)
    return "OK"


def run(inner: str, outer: str) -> int:
    """Relay between ``inner`` and ``outer`` until stdin ends; the exit code."""
    si, so = _open(inner), _open(outer)
    dirs = {"host": _Direction(so, si), "bridge": _Direction(si, so)}
    by_fd = {si.fileno(): dirs["bridge"], so.fileno(): dirs["host"]}
    indexes = [socket.if_nametoindex(name) for name in (inner, outer)]
    poller = select.poll()
    for fd in (*by_fd, 0):
        poller.register(fd, select.POLLIN)
    view = memoryview(bytearray(_FRAME_MAX))
    pending = b""
    print("READY", flush=True)
    next_check = time.monotonic() + 1.0
    while True:
        now = time.monotonic()
        due = min(dirs["host"].release(now), dirs["bridge"].release(now), next_check)
        for fd, _ in poller.poll(max(0.0, (due - now) * 1e3)):  # ms, rounded up
            if fd:
                by_fd[fd].receive(view, time.monotonic())
                continue
            data = os.read(0, 65536)
            if not data:
                return 0
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if line.strip():
                    print(_command(line.decode(errors="replace"), dirs), flush=True)
        if time.monotonic() >= next_check:  # an interface deleted (its hosts removed)
            next_check = time.monotonic() + 1.0
            try:
                gone = [socket.if_nametoindex(name) for name in (inner, outer)] != indexes
            except OSError:
                gone = True
            if gone:
                print(f"fiber shaper: {inner} or {outer} is gone", file=sys.stderr)
                return 1


# -- driving it from the test process -----------------------------------------------------


def settings(towards: str, loss: float, delay_ms: float) -> str:
    """The ``set`` line of these settings.

    Raises:
        ValueError: ``towards`` is not one of `TOWARDS`, or a value is out of range.
    """
    if towards not in TOWARDS or not 0 <= loss <= 1 or not 0 <= delay_ms < math.inf:
        raise ValueError(f"expected towards in {TOWARDS}, 0 <= loss <= 1 and delay_ms >= 0, "
                         f"got {towards!r}, {loss!r}, {delay_ms!r}")
    return f"set {towards} loss={float(loss)!r} delay_ms={float(delay_ms)!r}"


def tampering(towards: str, after: int, connections: int, peer: Optional[str] = None) -> str:
    """The ``tamper`` line: flip the byte at offset ``after`` of the TCP payload of each
    of the next ``connections`` connections (0: none more) that start ``towards`` a side,
    to or from ``peer`` if given (see `fiber_ci._tamper.Tamper`).

    Raises:
        ValueError: ``towards`` is not one of `TOWARDS`, or a value is out of range.
    """
    if towards not in TOWARDS:
        raise ValueError(f"expected towards in {TOWARDS}, got {towards!r}")
    Tamper(after, connections, peer)  # its checks
    return (f"tamper {towards} after={int(after)} connections={int(connections)}"
            + (f" peer={peer}" if peer else ""))


def relay(run_cmd: Callable[[Sequence[str]], object], bridge: str, host_end: str,
          port: str, relay_end: str) -> Shaper:
    """Put a new veth pair ``port`` (a bridge port) ═ ``relay_end`` in place of the bridge
    port ``host_end``, and a started `Shaper` between ``host_end`` and ``relay_end``.

    The relay's ends, which have no address, are made deaf to IP (else the root namespace
    answers ARP requests for its bridge address from them too). The bridge keeps its MAC
    address (the host has it in its ARP cache), which it may have taken from ``host_end``,
    so that one gets another: else the frames to it would reach the root namespace twice,
    from ``host_end`` past the relay and through it from the bridge.
    """
    with open(f"/sys/class/net/{bridge}/address") as f:
        run_cmd(["ip", "link", "set", bridge, "address", f.read().strip()])
    mac = "02:" + ":".join(f"{b:02x}" for b in os.urandom(5))  # locally administered
    run_cmd(["ip", "link", "set", host_end, "address", mac])
    run_cmd(["ip", "link", "add", port, "type", "veth", "peer", "name", relay_end])
    for dev in (host_end, relay_end):
        for path, value in ((f"ipv4/conf/{dev}/arp_ignore", "8"),
                            (f"ipv6/conf/{dev}/disable_ipv6", "1")):
            if os.path.exists(f"/proc/sys/net/{path}"):
                with open(f"/proc/sys/net/{path}", "w") as f:
                    f.write(value)
    run_cmd(["ip", "link", "set", host_end, "nomaster"])
    try:
        run_cmd(["ip", "link", "set", relay_end, "up"])
        run_cmd(["ip", "link", "set", port, "master", bridge, "up"])
        return Shaper(host_end, relay_end)
    except BaseException:  # the host back on the bridge, as it was
        run_cmd(["ip", "link", "delete", port])
        run_cmd(["ip", "link", "set", host_end, "master", bridge])
        raise


class Shaper:
    """The relay process of one link, started (it is bound when this returns) and driven
    over its stdin."""

    def __init__(self, inner: str, outer: str, timeout: float = 15.0) -> None:
        self._err = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "fiber_ci._shaper", inner, outer], env=subprocess_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)
        self.pid, self._buf = self._proc.pid, b""
        try:
            if self._reply(timeout) != "READY":
                raise RuntimeError(f"link shaper {self.pid} did not say READY")
        except BaseException:
            self.close()
            raise

    def _reply(self, timeout: float = 15.0) -> str:
        assert self._proc.stdout is not None
        fd, deadline = self._proc.stdout.fileno(), time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"link shaper {self.pid}: no answer within {timeout} s")
            data = os.read(fd, 65536)
            if not data:
                self._err.seek(0)
                raise RuntimeError(f"link shaper {self.pid} exited ({self._proc.wait()}): "
                                   f"{self._err.read().decode(errors='replace').strip()}")
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def ask(self, command: str) -> str:
        """Send one control line (`settings`, ``stats``); its answer."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(command.encode() + b"\n")
        self._proc.stdin.flush()
        answer = self._reply()
        if answer.startswith("ERROR"):
            raise RuntimeError(f"link shaper {self.pid}: {answer}")
        return answer

    def close(self, timeout: float = 3.0) -> None:
        """End the relay: EOF on its stdin, SIGKILL if it has not exited ``timeout`` s on."""
        try:
            self._proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
        self._err.close()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m fiber_ci._shaper INNER OUTER")
    sys.exit(run(sys.argv[1], sys.argv[2]))
