"""Several "hosts" on one Linux machine: network namespaces joined by a bridge (root only).
The backend that runs jobs on them is `fiber_ci.netns`, which documents both.

`Hosts.shape` adds loss and delay to one host's link with a userspace relay
(`fiber_ci._shaper`, which shows the layout): the kernels this runs on may have no
``sch_netem`` and no iptables, so ``tc ... netem`` is not an option."""


from __future__ import annotations

import atexit
import ipaddress
import json
import os
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from ._namespaces import (
    PREFIX,
    cleanup_stale,
    fmt,
    netns_pids,
    ours,
    release,
    remove,
    run,
    subnet_in_use,
    try_claim,
)
from ._shaper import Shaper, relay, settings, tampering

__all__ = ["Hosts", "HostList", "HOSTS_ENV", "NETWORK"]

#: Every address this module assigns lies in this network.
NETWORK = ipaddress.ip_network("10.202.0.0/16")
#: Environment variable through which jobs inherit the host list (JSON).
HOSTS_ENV = "FIBER_NETNS_HOSTS"

_MAX_HOSTS = 200  # host i gets .(10 + i)


# -- hosts --------------------------------------------------------------------------------


class HostList:
    """Where jobs can be placed: ``(namespace, ip)`` per host and the master's address."""

    def __init__(self, hosts: Sequence[Tuple[str, str]], root_ip: str) -> None:
        self._hosts = [(str(n), str(a)) for n, a in hosts]
        self._root_ip = root_ip

    @property
    def hosts(self) -> List[Tuple[str, str]]:
        return list(self._hosts)

    @property
    def root_ip(self) -> str:
        return self._root_ip

    def exec_prefix(self, i: int) -> List[str]:
        return ["ip", "netns", "exec", self.hosts[_check_host(i, len(self._hosts)) - 1][0]]

    def to_env(self) -> str:
        return json.dumps({"root_ip": self.root_ip, "hosts": self.hosts})

    @classmethod
    def from_env(cls, value: str) -> HostList:
        data = json.loads(value)
        return cls([tuple(h) for h in data["hosts"]], data["root_ip"])


def _check_host(i: int, n: int) -> int:
    if isinstance(i, bool) or not isinstance(i, int) or not 1 <= i <= n:
        raise IndexError(f"host number must be in 1..{n} (hosts are h1..h{n}), got {i!r}")
    return i


class Hosts:
    """N network-namespace "hosts" on a bridge; see the module docstring.

    Hosts are numbered from 1 (``h1`` .. ``hN``) in `exec_prefix`, `partition`,
    `shape` and `name`; `hosts` lists them in that order. Needs root.
    """

    def __init__(self, n: int = 3, *, index: Optional[int] = None,
                 check: bool = True) -> None:
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _MAX_HOSTS:
            raise ValueError(f"n must be in 1..{_MAX_HOSTS}, got {n!r}")
        if index is not None and not 0 <= index <= 255:
            raise ValueError(f"index must be in 0..255, got {index!r}")
        self.n = n
        self._want_index = index
        self._check = check
        self._k: Optional[int] = None
        self._lock_fd: Optional[int] = None
        self._started = False
        self._mutex = threading.RLock()
        self._shapers: Dict[int, Shaper] = {}

    # -- names and addresses ------------------------------------------------------------

    @property
    def index(self) -> int:
        """The claimed ``<k>``: names ``fbt<k>...``, network 10.202.<k>.0/24."""
        if self._k is None:
            raise RuntimeError("Hosts not started")
        return self._k

    @property
    def tag(self) -> str:
        """The prefix of every name these hosts use (``fbt<k>``: ``<k>`` their index)."""
        return f"{PREFIX}{self.index}"

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        """The bridge's network, ``10.202.<k>.0/24``."""
        return ipaddress.IPv4Network(f"{NETWORK.network_address + (self.index << 8)}/24")

    @property
    def bridge(self) -> str:
        """The bridge's name, ``fbt<k>br``."""
        return f"{self.tag}br"

    @property
    def root_ip(self) -> str:
        """The root namespace's address on the bridge: where the master listens."""
        return str(self.subnet.network_address + 1)

    def name(self, i: int) -> str:
        """The namespace of host ``i`` (1-based)."""
        return f"{self.tag}-h{_check_host(i, self.n)}"

    def ip(self, i: int) -> str:
        """Host ``i``'s address (1-based): ``10.202.<k>.<10 + i>``."""
        return str(self.subnet.network_address + 10 + _check_host(i, self.n))

    def veth(self, i: int) -> str:
        """The bridge-side (root namespace) end of host ``i``'s veth pair."""
        return f"{self.tag}h{_check_host(i, self.n)}"

    def _port(self, i: int) -> str:
        """Host ``i``'s bridge port: `veth`, or ``fbt<k>s<i>`` once `shape` relays it."""
        return f"{self.tag}s{i}" if i in self._shapers else self.veth(i)

    @property
    def hosts(self) -> List[Tuple[str, str]]:
        """``(namespace, ip)`` of h1 .. hN."""
        return [(self.name(i), self.ip(i)) for i in range(1, self.n + 1)]

    def exec_prefix(self, i: int) -> List[str]:
        """The argv prefix that runs a command in host ``i`` (1-based)."""
        self._require_started()
        return ["ip", "netns", "exec", self.name(i)]

    def pids(self, i: int) -> List[int]:
        """Pids of the processes running in host ``i``."""
        self._require_started()
        return netns_pids(self.name(i))

    def host_list(self) -> HostList:
        """The hosts and the master's address, as jobs are placed on them.

        Raises:
            RuntimeError: the hosts are not started.
        """
        self._require_started()
        return HostList(self.hosts, self.root_ip)

    def to_env(self) -> str:
        """The value of ``FIBER_NETNS_HOSTS`` that jobs get: the host list as JSON.

        Raises:
            RuntimeError: the hosts are not started.
        """
        return self.host_list().to_env()

    @property
    def started(self) -> bool:
        """Whether ``start`` has created the hosts (and ``stop`` not removed them)."""
        return self._started

    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("Hosts not started: call start() first")

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> Hosts:
        """Create the bridge, the namespaces and their links (idempotent); returns self.

        Raises:
            RuntimeError: a setup command failed (the message names it, its exit code and
                its stderr) or the hosts cannot reach each other; whatever was created is
                removed.
        """
        with self._mutex:
            if self._started:
                return self
            try:
                cleanup_stale()
                self._claim_index()
                self._create()
                self._started = True
                if self._check:
                    self.check()
            except BaseException as e:
                self._started = False
                try:
                    self.stop()
                except Exception as cleanup_error:  # keep the first error, mention this one
                    raise RuntimeError(f"{e}\n(cleanup after the failure also failed: "
                                       f"{cleanup_error})") from e
                raise
            atexit.register(self._stop_at_exit)
            return self

    def _claim_index(self) -> None:
        order = ([self._want_index] if self._want_index is not None
                 else [(os.getpid() + j) % 256 for j in range(256)])
        busy = []
        for k in order:
            fd = try_claim(k)
            if fd is None:
                busy.append(f"{k}: claimed by another run")
                continue
            self._k, self._lock_fd = k, fd  # from here on, stop() cleans up index k
            namespaces, links = ours(k)
            if namespaces.get(k) or links.get(k):  # left by a run that died
                remove(namespaces.get(k, []), links.get(k, []))
            used = subnet_in_use(self.subnet)
            if used is None:
                return
            busy.append(f"{k}: {self.subnet} in use ({used})")
            self._k, self._lock_fd = None, None
            release(fd)
        raise RuntimeError("no free 10.202.<k>.0/24 network for netns hosts: "
                           + "; ".join(busy[:5]) + (" ..." if len(busy) > 5 else ""))

    def _create(self) -> None:
        br = self.bridge
        # A fixed MAC: a bridge without one takes its lowest port's and changes it as
        # ports come and go (the shaper takes a host's port off and back); the hosts'
        # ARP entries then point at nothing for ~30 s, and their connections stall.
        a, b, c, _ = self.root_ip.split(".")
        mac = f"02:fb:{int(a):02x}:{int(b):02x}:{int(c):02x}:01"
        run(["ip", "link", "add", br, "address", mac, "type", "bridge"])
        run(["ip", "addr", "add", f"{self.root_ip}/24", "dev", br])
        run(["ip", "link", "set", br, "up"])
        for i in range(1, self.n + 1):
            ns, veth = self.name(i), self.veth(i)
            run(["ip", "netns", "add", ns])
            run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0",
                  "netns", ns])
            run(["ip", "link", "set", veth, "master", br, "up"])
            run(["ip", "-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0"])
            run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
        for i in range(1, self.n + 1):
            self._wait_link_up(i)

    def _wait_link_up(self, i: int, timeout: float = 10.0) -> None:
        """Wait until host ``i``'s link carries packets.

        The kernel applies a carrier change to a device's queue (and to its operstate) up
        to a second later (linkwatch); a packet sent before that is dropped, so an ARP
        request right after a reconnect is lost and connect() fails with "No route to
        host". Wait for both ends to be operationally up and the bridge port forwarding.
        """
        deadline = time.monotonic() + timeout
        port = self._port(i)  # shaped: the relay's veth pair must be up too
        ends = [self.veth(i)] + ([port, f"{self.tag}r{i}"] if port != self.veth(i) else [])
        while True:
            try:
                root_up = True
                for end in ends:
                    with open(f"/sys/class/net/{end}/operstate") as f:
                        root_up = root_up and f.read().strip() == "up"
                with open(f"/sys/class/net/{port}/brport/state") as f:
                    forwarding = f.read().strip() == "3"  # BR_STATE_FORWARDING
            except OSError:
                root_up = forwarding = True  # no sysfs here: nothing to wait for
            if root_up and forwarding:
                out = run(["ip", "-n", self.name(i), "-o", "link", "show", "dev", "eth0"]).stdout
                if " state UP " in out:
                    return
            if time.monotonic() >= deadline:
                raise RuntimeError(f"the link of host {self.name(i)} is not up after "
                                   f"{timeout} s (root ends {ends}: up={root_up}, "
                                   f"port {port} forwarding={forwarding})")
            time.sleep(0.02)

    def check(self, timeout: float = 10.0) -> None:
        """Verify TCP connectivity: every host to the root, and h2..hN to h1.

        Raises:
            RuntimeError: a connection failed (a firewall on bridged traffic, say).
        """
        self._require_started()
        import socket

        code = ("import socket,sys\n"
                "for a in sys.argv[1:]:\n"
                "    h, p = a.rsplit(':', 1)\n"
                f"    socket.create_connection((h, int(p)), timeout={timeout!r}).close()\n")
        listen_code = ("import socket,sys\n"
                       "s = socket.socket(); s.bind((sys.argv[1], 0)); s.listen(64)\n"
                       "print(s.getsockname()[1], flush=True); sys.stdin.read()\n")
        root = socket.socket()
        root.bind((self.root_ip, 0))
        root.listen(64)
        listener = subprocess.Popen(
            self.exec_prefix(1) + [sys.executable, "-c", listen_code, self.ip(1)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert listener.stdout is not None
            line = listener.stdout.readline().strip()
            if not line.isdigit():
                raise RuntimeError(f"connectivity check: no listener in {self.name(1)}: "
                                   f"{listener.stderr.read() if listener.stderr else ''}")
            h1 = f"{self.ip(1)}:{line}"
            to_root = f"{self.root_ip}:{root.getsockname()[1]}"
            for i in range(1, self.n + 1):
                targets = [to_root] + ([h1] if i > 1 else [])
                argv = self.exec_prefix(i) + [sys.executable, "-c", code, *targets]
                cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, timeout=timeout + 20)
                if cp.returncode != 0:
                    raise RuntimeError(
                        f"connectivity check failed: host {self.name(i)} ({self.ip(i)}) "
                        f"cannot connect to {' and '.join(targets)}: "
                        f"`{fmt(argv)}` exited with {cp.returncode}: "
                        f"{(cp.stderr.strip().splitlines() or ['(no output)'])[-1]}. A firewall "
                        "on bridged traffic (net.bridge.bridge-nf-call-iptables=1 with an "
                        "iptables FORWARD policy of DROP, as container engines set) would do this.")
        finally:
            root.close()
            try:
                listener.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                listener.kill()
                listener.communicate()

    def partition(self, i: int, on: bool = True) -> None:
        """``on``: cut host ``i`` off the bridge (its veth goes down); else reconnect it.

        A shaped host is cut the same way: its veth is the relay's end, which then drops
        what it would send to the host (counted as ``failed``)."""
        self._require_started()
        run(["ip", "link", "set", self.veth(i), "down" if on else "up"])
        if not on:
            self._wait_link_up(i)
            # Forget addresses that failed to resolve while cut off, on both sides.
            run(["ip", "-n", self.name(i), "neigh", "flush", "dev", "eth0"], check=False)
            run(["ip", "neigh", "flush", "dev", self.bridge, "to", self.ip(i)], check=False)

    def shape(self, i: int, *, loss: float = 0.0, delay_ms: float = 0.0,
              towards: str = "both") -> None:
        """Lose a fraction ``loss`` of host ``i``'s frames and delay them ``delay_ms``: of
        those travelling ``towards`` ``"host"`` (to host ``i``), ``"bridge"`` (from it) or
        ``"both"``; each direction keeps its own settings. The first call puts a relay
        process on the host's link (in userspace: no netem here), till `stop`. ``loss=1.0``
        cuts the host off, its link up; frames already delayed keep their delay.

        Raises:
            ValueError: a setting is out of range. RuntimeError: the relay cannot start.
        """
        self._relay(i, settings(towards, loss, delay_ms))

    def tamper(self, i: int, *, after: int, connections: int = 1, towards: str = "both",
               peer: Optional[str] = None) -> None:
        """Flip the byte at offset ``after`` of the TCP payload of each of the next
        ``connections`` connections (0: no more) that start on host ``i``'s link,
        travelling ``towards`` ``"host"``, ``"bridge"`` or ``"both"`` (each direction
        counts its own), to or from ``peer`` if given: an on-path writer
        (`fiber_ci._tamper`). Puts the relay on the link as `shape` does.

        Raises:
            ValueError: a setting is out of range. RuntimeError: the relay cannot start.
        """
        self._relay(i, tampering(towards, after, connections, peer))

    def _relay(self, i: int, line: str) -> None:
        """Send ``line`` to host ``i``'s relay, put on its link first if need be."""
        self._require_started()
        with self._mutex:
            if _check_host(i, self.n) not in self._shapers:
                self._shapers[i] = relay(run, self.bridge, self.veth(i), f"{self.tag}s{i}",
                                         f"{self.tag}r{i}")
                self._wait_link_up(i)
            self._shapers[i].ask(line)

    def shaper_stats(self, i: int) -> Dict[str, Dict[str, int]]:
        """Host ``i``'s relay's counts per direction (``"host"``: frames towards it,
        ``"bridge"``): frames ``forwarded``, ``dropped`` (``loss``), ``failed`` (not sent:
        the kernel's queue full, the host partitioned), ``queued`` (delayed, not sent),
        ``altered`` (`tamper`) and of those ``partial`` (their checksum made later).

        Raises:
            RuntimeError: host ``i`` is not shaped.
        """
        with self._mutex:
            if _check_host(i, self.n) not in self._shapers:
                raise RuntimeError(f"host {self.name(i)} is not shaped: call shape() first")
            return json.loads(self._shapers[i].ask("stats"))  # type: ignore[no-any-return]

    def stop(self) -> None:
        """Kill every process in the hosts and delete everything (idempotent).

        Raises:
            RuntimeError: something could not be removed (the message says what).
        """
        with self._mutex:
            k = self._k
            if k is None:
                return
            self._started = False
            try:
                for shaper in self._shapers.values():
                    shaper.close()
                self._shapers.clear()
                namespaces, links = ours(k)
                names = sorted(set(namespaces.get(k, [])))
                problems = remove(names, links.get(k, []))
                namespaces, links = ours(k)
                left = namespaces.get(k, []) + links.get(k, [])
                if left:
                    problems.append(f"still present: {left}")
            finally:
                release(self._lock_fd)
                self._k, self._lock_fd = None, None
                atexit.unregister(self._stop_at_exit)
            if problems:
                raise RuntimeError("netns hosts not fully removed: " + "; ".join(problems))

    def _stop_at_exit(self) -> None:
        try:
            self.stop()
        except Exception as e:
            sys.stderr.write(f"fiber_ci.netns: {e}\n")

    def __enter__(self) -> Hosts:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        if self._k is None:
            return f"<Hosts n={self.n} stopped>"
        return f"<Hosts n={self.n} {self.tag} {self.subnet} root={self.root_ip}>"
