"""The settings of the ``ssh`` backend, and its host list.

Each key is ``ssh_<key>`` in ``fiber.init``, ``FIBER_SSH_<KEY>`` in the environment, and
``<key>`` in the ``[fiber.ssh]`` section of ``.fiberconfig`` (see ``fiber.config``); its
meaning is its ``#:`` comment, shown in the generated configuration reference."""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import ClassVar, List, Tuple

__all__ = ["SshSettings", "parse_hosts"]

#: A host as ssh takes it: a name from ssh_config or DNS, an address, ``user@host``.
_HOST_RE = re.compile(r"^[A-Za-z0-9_.@%+-]+$")
_IPV6_RE = re.compile(r"^[0-9A-Za-z:.%]+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_hosts(text: str) -> List[Tuple[str, int]]:
    """``[(host, slots)]`` of a host list: ``node1:8,node2:8``; a host without ``:N`` has
    one slot; an IPv6 address goes in brackets (``[fd00::2]:4``).

    Raises:
        ValueError: a host is malformed, listed twice, or has no slots; the message starts
            with ``hosts``.
    """
    out: List[Tuple[str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, slots, pattern = item, "1", _HOST_RE
        if item.startswith("["):
            end = item.find("]")
            name, rest, pattern = item[1:end], item[end + 1:], _IPV6_RE
            if end < 0 or (rest and not rest.startswith(":")):
                raise ValueError(f"hosts entry {item!r} is not [address] or [address]:N")
            slots = rest[1:] or "1"
        elif ":" in item:
            name, slots = item.rsplit(":", 1)
        if not slots.isdigit() or int(slots) < 1:
            raise ValueError(f"hosts entry {item!r}: the slots after ':' must be a whole "
                             "number of at least 1 (node1:8)")
        if not name or name.startswith("-") or not pattern.match(name):
            raise ValueError(f"hosts entry {item!r} is not a host name ssh takes "
                             "(node1, user@node1, 10.0.0.5, [fd00::2])")
        if any(name == seen for seen, _ in out):
            raise ValueError(f"hosts lists {name!r} twice: give it one entry with its slots")
        out.append((name, int(slots)))
    return out


@dataclasses.dataclass(frozen=True)
class SshSettings:
    """What the program's configuration says of the ``ssh`` backend."""

    #: ``FIBER_SSH_*`` variables that are not settings (never warned about).
    variables: ClassVar[Tuple[str, ...]] = (
        # read or printed by its test hosts (scripts/ssh-nodes.sh)
        "FIBER_SSH_DIR", "FIBER_SSH_NET", "FIBER_SSH_DRIVER_ADDR", "FIBER_SSH_NODES_SH",
    )

    #: Hosts that run fiber's jobs, each with its slots (the jobs it runs at once),
    #: comma-separated: ``node1:8,node2:8,user@gpu1:2``; a host without ``:N`` has one.
    #: A job takes one slot (``ceil(cpu)`` for ``@fiber.meta(cpu=...)``) until it ends,
    #: on the host with the most free slots; jobs that find none wait (pending).
    hosts: str = ""
    #: ssh_config file of the ssh client (``ssh -F``); empty: ``~/.ssh/config`` and the
    #: system's, as ``ssh`` reads them. The agent (``SSH_AUTH_SOCK``) is used either way.
    config: str = dataclasses.field(default="", metadata={"machine": True})
    #: Python interpreter on the hosts (``python`` wins when set); empty: the path of the
    #: master's own interpreter, for hosts that have it at the same path (a shared
    #: filesystem, or the same virtualenv installed on each).
    python: str = ""
    #: More ``ssh`` options, split like a shell command line (``-o Port=2222 -i ~/.ssh/lab``);
    #: they come before the host.
    options: str = ""
    #: Names of this process's environment variables that jobs get too, comma-separated
    #: (``PYTHONPATH,OMP_NUM_THREADS``); sent over the ssh channel, as fiber's own are. A
    #: job otherwise has the environment of a login on its host.
    env: str = ""
    #: Seconds ssh may take to connect to a host (``ConnectTimeout``).
    connect_timeout: int = 10
    #: Seconds between ssh's probes of a quiet connection (``ServerAliveInterval``): a
    #: host that answers none of ``ssh_alive_count`` probes in a row is lost, with its jobs.
    alive_interval: int = 5
    #: Probes a host may leave unanswered before its jobs count as lost
    #: (``ServerAliveCountMax``).
    alive_count: int = 3
    #: Connections to one host being set up at once, at most: sshd drops some of those
    #: beyond its ``MaxStartups`` (10 by default) before they authenticate.
    max_startups: int = 8
    #: Seconds between two attempts to reach a host that could not be reached, or whose
    #: connection was lost: no job goes to it in between.
    retry_interval: float = 10.0

    def __post_init__(self) -> None:
        parse_hosts(self.hosts)
        for name in ("connect_timeout", "alive_interval", "alive_count", "max_startups"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if self.retry_interval <= 0:
            raise ValueError(f"retry_interval must be positive, got {self.retry_interval!r}")
        try:
            words = shlex.split(self.options)
        except ValueError as e:
            raise ValueError(f"options cannot be split like a command line: {e}") from None
        if any(not w.startswith("-") for w in words[:1]):
            raise ValueError(f"options must start with an option (-o ...), got {self.options!r}")
        for name in self.env_names():
            if not _ENV_NAME_RE.match(name):
                raise ValueError(f"env lists {name!r}, which is not a variable name")

    def host_list(self) -> List[Tuple[str, int]]:
        """``[(host, slots)]`` of ``hosts``."""
        return parse_hosts(self.hosts)

    def option_words(self) -> List[str]:
        """``options`` as ssh's arguments."""
        return shlex.split(self.options)

    def env_names(self) -> List[str]:
        """The variables of ``env``."""
        return [n.strip() for n in self.env.split(",") if n.strip()]
