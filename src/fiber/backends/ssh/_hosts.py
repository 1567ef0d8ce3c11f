"""The ssh backend's hosts: their slots, their state, where the next job goes.

A host is ``up`` (it answered its last probe or carries a live session), ``down`` (it
could not be reached, or a connection to it was lost: no job goes to it until a probe
``retry_interval`` later finds it answering again), or ``new`` (not tried yet: the
first submit probes it). A job takes ``slots`` of its host from the moment its ssh
client starts until it exits; a host also has at most ``max_startups`` connections being
set up at once (sshd drops connections beyond its ``MaxStartups`` before they
authenticate).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

from ._session import Probe

__all__ = ["Host", "HostTable"]

NEW, UP, DOWN = "new", "up", "down"


class Host:
    """One host of the list: what it holds now (under the backend's lock)."""

    def __init__(self, name: str, slots: int) -> None:
        self.name = name
        self.slots = slots
        self.used = 0
        self.opening = 0  # sessions started whose connection is not set up yet
        self.state = NEW
        self.reason = ""  # why it is down
        self.retry_at = 0.0  # when a down host is probed again
        self.probe: Optional[Probe] = None
        self.listed = True  # in the configuration's host list now
        self.ever_up = False  # it has taken jobs, or answered a probe

    @property
    def free(self) -> int:
        return self.slots - self.used

    def went_down(self, reason: str, retry_interval: float) -> bool:
        """It failed (``reason``): no job goes to it for ``retry_interval`` s. Whether
        it was up or new until now."""
        was = self.state != DOWN
        self.state, self.reason = DOWN, reason
        self.retry_at = time.monotonic() + retry_interval
        return was

    def __repr__(self) -> str:
        return f"<Host {self.name} {self.used}/{self.slots} {self.state}>"


class HostTable:
    """The hosts of the configuration's list, in its order, as jobs are placed on them."""

    def __init__(self) -> None:
        self._hosts: Dict[str, Host] = {}

    def update(self, listed: Sequence[Tuple[str, int]]) -> None:
        """Take the host list now in force: new hosts are added, slots changed; a host no
        longer listed keeps its jobs but gets no new ones."""
        names = {name for name, _ in listed}
        for host in self._hosts.values():
            host.listed = host.name in names
        for name, slots in listed:
            known = self._hosts.get(name)
            if known is None:
                self._hosts[name] = Host(name, slots)
            else:
                known.slots = slots

    def get(self, name: str) -> Host:
        return self._hosts[name]

    def hosts(self) -> List[Host]:
        """Every host, listed or not, in the order they were first listed."""
        return list(self._hosts.values())

    def listed(self) -> List[Host]:
        return [h for h in self._hosts.values() if h.listed]

    def largest(self) -> int:
        """The slots of the largest listed host (0 when none is listed)."""
        return max((h.slots for h in self.listed()), default=0)

    def pick(self, slots: int, max_startups: int) -> Optional[Host]:
        """The up host with the most free slots (the first listed among equals) that has
        ``slots`` free and can set up one more connection; None if none can."""
        best: Optional[Host] = None
        for host in self.listed():
            if (host.state == UP and host.free >= slots and host.opening < max_startups
                    and (best is None or host.free > best.free)):
                best = host
        return best
