"""What a ring's rendezvous is made of: addresses, the reserved port, interfaces, the plan.

The member side (`fiber.ring._member`) finds the address it is reached at and, on
rank 0, reserves the rendezvous port; the master (`fiber.ring._ring`) turns every
member's `Hello` into the environment of each rank (`plan`), with torchrun's
names. Nothing here sends a message.
"""

from __future__ import annotations

import fcntl
import socket
import struct
from typing import Dict, List, NamedTuple, Optional

from .._core import _runtime

__all__ = ["Hello", "member_address", "reserve_port", "interfaces", "socket_ifname", "plan"]

_SIOCGIFADDR = 0x8915  # Linux: an interface's (primary) IPv4 address


class Hello(NamedTuple):
    """What a member tells the master before the rendezvous: where it is reached, and on
    rank 0 the reserved port and whether a torch store already listens on it."""

    address: str
    port: Optional[int]
    store: bool


def member_address() -> str:
    """The address this member is reached at: the one its hub listens on, i.e. on the
    route to its parent (see `fiber._core._runtime.listen_host`)."""
    return _runtime.listen_host()


def reserve_port(address: str, listen: bool = False) -> socket.socket:
    """A TCP socket bound to ``address`` and a port the kernel picked: while it is open,
    nothing else on this host can bind that port, nor use it as a source port. It listens
    only if ``listen`` (a store is started on it): a listening reservation would queue
    the other ranks' early connections and reset them when it closes, where a bound one
    refuses them, which a store's clients try again."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((address, 0))
        if listen:
            sock.listen(128)
    except BaseException:
        sock.close()
        raise
    return sock


def _ipv6_interfaces() -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                fields = line.split()
                if len(fields) == 6:
                    packed = bytes.fromhex(fields[0])
                    out.setdefault(fields[5], []).append(socket.inet_ntop(socket.AF_INET6,
                                                                          packed))
    except OSError:  # no IPv6 here
        pass
    return out


def interfaces() -> Dict[str, List[str]]:
    """This host's network interfaces that have an address: name -> addresses (the
    primary IPv4 address of each, and every IPv6 one)."""
    out = _ipv6_interfaces()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                req = struct.pack("256s", name.encode()[:15])
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, req)
            except OSError:  # no IPv4 address
                continue
            out.setdefault(name, []).insert(0, socket.inet_ntoa(packed[20:24]))
    return out


def socket_ifname(address: str) -> Optional[str]:
    """The interface gloo and NCCL should use on this host: the one carrying ``address``,
    when the host has several interfaces (``lo`` counts: gloo's own guess, the address of
    the host's name, may be one the other members cannot reach). None when the host has
    only one, or when no interface carries ``address`` (a secondary IPv4 address)."""
    found = interfaces()
    if len(found) < 2:
        return None
    for name, addresses in found.items():
        if address in addresses:
            return name
    return None


def plan(hellos: List[Hello], restart: int, max_restarts: int) -> List[Dict[str, str]]:
    """The environment of each rank (index = rank), from every member's hello.

    Members whose addresses are equal share a host ("node"): ``LOCAL_RANK`` counts them
    in rank order, ``GROUP_RANK`` numbers hosts in the order of their lowest rank. Ranks
    of one host need not be contiguous: the backend placed the members.
    """
    size = len(hellos)
    master = hellos[0]
    if master.port is None:
        raise ValueError("rank 0 reserved no port")
    hosts: Dict[str, List[int]] = {}
    for rank, hello in enumerate(hellos):
        hosts.setdefault(hello.address, []).append(rank)
    group_of = {address: i for i, address in enumerate(hosts)}
    envs = []
    for rank, hello in enumerate(hellos):
        local = hosts[hello.address]
        env = {
            "MASTER_ADDR": master.address,
            "MASTER_PORT": str(master.port),
            "RANK": str(rank),
            "WORLD_SIZE": str(size),
            "LOCAL_RANK": str(local.index(rank)),
            "LOCAL_WORLD_SIZE": str(len(local)),
            "GROUP_RANK": str(group_of[hello.address]),
            "GROUP_WORLD_SIZE": str(len(hosts)),
            "TORCHELASTIC_RESTART_COUNT": str(restart),
            "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
            # rank 0 serves torch's TCPStore on the port: every rank is its client (said
            # either way, so that a value inherited from a torchrun parent cannot mislead)
            "TORCHELASTIC_USE_AGENT_STORE": str(master.store),
        }
        envs.append(env)
    return envs
