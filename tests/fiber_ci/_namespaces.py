"""fiber's test hosts as this machine sees them: running ``ip``, finding the namespaces
and links of a run (named ``fbt<k>-h<i>``, ``fbt<k>br``...), removing them, and the lock
of a run's index ``k`` that tells a live run's hosts from a dead one's (root only)."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import re
import shlex
import signal
import subprocess
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["PREFIX", "run", "fmt", "ours", "netns_pids", "kill_all_in", "remove",
           "try_claim", "release", "cleanup_stale", "subnet_in_use"]

#: The first letters of every namespace and link name of a test run.
PREFIX = "fbt"
_ROUTE_TYPES = frozenset({"unicast", "local", "broadcast", "multicast", "throw", "unreachable",
                          "prohibit", "blackhole", "nat", "anycast"})


# -- running commands ---------------------------------------------------------------------


def fmt(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def run(argv: Sequence[str], *, check: bool = True,
         timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    """Run a command; with ``check``, a failure raises RuntimeError saying what and why."""
    try:
        cp = subprocess.run(list(argv), stdin=subprocess.DEVNULL, capture_output=True,
                            text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise RuntimeError(f"command `{fmt(argv)}` cannot run: {e} "
                           "(netns hosts need `ip` from iproute2)") from None
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"command `{fmt(argv)}` did not finish within {timeout} s") from None
    if check and cp.returncode != 0:
        out = cp.stderr.strip() or cp.stdout.strip() or "(no output)"
        hint = ""
        if "Operation not permitted" in out or os.geteuid() != 0:
            hint = " (netns hosts need root, or CAP_SYS_ADMIN and CAP_NET_ADMIN)"
        raise RuntimeError(
            f"command `{fmt(argv)}` failed with exit code {cp.returncode}: {out}{hint}")
    return cp


def names_of_namespaces() -> List[str]:
    out = run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def names_of_links() -> List[str]:
    out = run(["ip", "-o", "link", "show"]).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def ours(index: Optional[int] = None) -> Tuple[Dict[int, List[str]], Dict[int, List[str]]]:
    """Namespaces and links named like ours, by index: ({k: [ns]}, {k: [link]})."""
    k_pat = r"\d{1,3}" if index is None else str(index)
    ns_re = re.compile(rf"^{PREFIX}({k_pat})-h\d+$")
    link_re = re.compile(rf"^{PREFIX}({k_pat})(br|[hsr]\d+)$")  # [sr]: `Hosts.shape`
    namespaces: Dict[int, List[str]] = {}
    links: Dict[int, List[str]] = {}
    for name in names_of_namespaces():
        m = ns_re.match(name)
        if m:
            namespaces.setdefault(int(m.group(1)), []).append(name)
    for name in names_of_links():
        m = link_re.match(name)
        if m:
            links.setdefault(int(m.group(1)), []).append(name)
    return namespaces, links


def netns_pids(ns: str) -> List[int]:
    cp = run(["ip", "netns", "pids", ns], check=False)
    return [int(tok) for tok in cp.stdout.split() if tok.isdigit()]


def kill_all_in(ns: str, timeout: float = 5.0) -> List[int]:
    """SIGKILL every process in namespace ``ns``; the pids still there after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        pids = [p for p in netns_pids(ns) if p != os.getpid()]
        if not pids or time.monotonic() >= deadline:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def remove(namespaces: Sequence[str], links: Sequence[str]) -> List[str]:
    """Delete namespaces (killing their processes first) and links; the problems met."""
    problems = []
    for ns in namespaces:
        left = kill_all_in(ns)
        if left:
            problems.append(f"processes {left} in {ns} survived SIGKILL")
    for ns in namespaces:
        cp = run(["ip", "netns", "delete", ns], check=False)
        if cp.returncode != 0 and os.path.exists(f"/run/netns/{ns}"):
            problems.append(f"`ip netns delete {ns}` failed: {cp.stderr.strip()}")
    # veths first (a veth whose namespace is held by a stray process outlives `netns
    # delete`; deleting our end deletes the pair), the bridge last.
    existing = set(names_of_links())
    for link in sorted(links, key=lambda name: name.endswith("br")):
        if link not in existing:
            continue
        cp = run(["ip", "link", "delete", link], check=False)
        if cp.returncode != 0 and link in names_of_links():
            problems.append(f"`ip link delete {link}` failed: {cp.stderr.strip()}")
    return problems


# -- index claims -------------------------------------------------------------------------


def _lock_dir() -> str:
    for base in ("/run", tempfile.gettempdir()):
        path = os.path.join(base, "fiber-testing-netns")
        try:
            os.makedirs(path, exist_ok=True)
            if os.access(path, os.W_OK):
                return path
        except OSError:
            continue
    raise RuntimeError("no writable directory for netns lock files (/run or the temp dir)")


def try_claim(index: int) -> Optional[int]:
    """A file descriptor holding the lock of ``index``, or None when another run has it."""
    fd = os.open(os.path.join(_lock_dir(), f"{index}.lock"),
                 os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def release(fd: Optional[int]) -> None:
    if fd is not None:
        try:
            os.close(fd)  # drops the flock
        except OSError:
            pass


def cleanup_stale() -> List[str]:
    """Remove hosts left behind by runs that died (their lock is free); what was removed."""
    namespaces, links = ours()
    removed = []
    for k in sorted(set(namespaces) | set(links)):
        fd = try_claim(k)
        if fd is None:
            continue  # a live run owns it
        try:
            remove(namespaces.get(k, []), links.get(k, []))
            removed += namespaces.get(k, []) + links.get(k, [])
        finally:
            release(fd)
    return removed


def subnet_in_use(subnet: ipaddress.IPv4Network) -> Optional[str]:
    """The route or address of this (root) namespace that overlaps ``subnet``, if any."""
    for line in run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
        toks = line.split()
        if "inet" in toks:
            iface = ipaddress.ip_interface(toks[toks.index("inet") + 1])
            if iface.network.overlaps(subnet):
                return f"address {iface} on {toks[1]}"
    for line in run(["ip", "-4", "route", "show", "table", "all"]).stdout.splitlines():
        toks = line.split()
        if not toks:
            continue
        dest = toks[1] if toks[0] in _ROUTE_TYPES and len(toks) > 1 else toks[0]
        if dest == "default":
            continue
        try:
            net = ipaddress.ip_network(dest, strict=False)
        except ValueError:
            continue
        if net.overlaps(subnet):
            return f"route {line.strip()}"
    return None
