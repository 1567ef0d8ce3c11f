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

import os
import sys
import threading
import time
from typing import Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..._log import warn
from ..._process_state import here
from ._session import Probe, ssh_base
from ._settings import SshSettings

__all__ = ["Host", "HostTable"]

NEW, UP, DOWN = "new", "up", "down"
#: Seconds a probe may take beyond ssh's ConnectTimeout (a Python starting on a busy host).
_PROBE_SLACK_S = 20.0


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
        self.checked: Set[str] = set()  # the Pythons that found fiber there

    @property
    def free(self) -> int:
        return self.slots - self.used

    def up(self) -> None:
        self.state, self.reason = UP, ""

    def __repr__(self) -> str:
        return f"<Host {self.name} {self.used}/{self.slots} {self.state}>"


class HostTable:
    """The hosts of the configuration's list, in its order, as jobs are placed on them."""

    def __init__(self) -> None:
        self._hosts: Dict[str, Host] = {}
        self._contact = threading.Lock()  # one first contact at a time
        self.log_dir = ""  # where the probes' ssh logs go (the backend's)
        self._python = ""  # the Python probes look for fiber in

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

    def pick(self, slots: int, max_startups: int,
             avoid: FrozenSet[str] = frozenset()) -> Optional[Host]:
        """The up host with the most free slots (the first listed among equals) that has
        ``slots`` free and can set up one more connection; None if none can. Hosts of
        ``avoid`` (a pool's suspected ones) only when every up host is one of them: a
        job then waits for a slot elsewhere rather than start where it is cut off."""
        up = [host for host in self.listed() if host.state == UP]
        if any(host.name not in avoid for host in up):
            up = [host for host in up if host.name not in avoid]
        best: Optional[Host] = None
        for host in up:
            if (host.free >= slots and host.opening < max_startups
                    and (best is None or host.free > best.free)):
                best = host
        return best

    # -- probes (under the backend's lock, but first_contact) -----------------------------

    def went_down(self, host: Host, reason: str, own: SshSettings) -> None:
        """``host`` failed (``reason``): no job goes to it for ``retry_interval`` s, then
        a probe tries it again. Said when it was up."""
        was_up = host.state == UP
        host.state, host.reason = DOWN, reason
        host.retry_at = time.monotonic() + own.retry_interval
        if was_up:
            warn("ssh host %s is down (%s): no new job goes to it until it answers again "
                 "(tried every %g s)", host.name, reason, own.retry_interval)

    def contact(self, own: SshSettings, python: str, lock: threading.Lock,
                down_too: bool = False, skip: Sequence[str] = ()) -> List[str]:
        """Probe, all at once, and wait for their answers: the hosts never tried yet, those
        up that have not run ``python`` yet, and with ``down_too`` those down (but the
        hosts of ``skip``). Not under ``lock``, the backend's, which guards the table.
        The names of the hosts probed."""
        self._python = python
        with self._contact:
            with lock:
                todo = [h for h in self.listed() if h.name not in skip and (
                    h.state == NEW or (h.state == UP and python not in h.checked)
                    or (down_too and h.state == DOWN))]
                for host in todo:  # a retry the thread started: this one's answer is newer
                    if host.probe is not None:
                        host.probe.kill()
                        host.probe = None
            probes = [self._probe(h.name, own, python) for h in todo]
            results = []
            for probe in probes:
                reason = probe.result(own.connect_timeout + _PROBE_SLACK_S)
                if reason is None:
                    probe.kill()
                    reason = f"no answer within {own.connect_timeout + _PROBE_SLACK_S:.0f} s"
                results.append(reason)
            with lock:
                for host, probe, reason in zip(todo, probes, results):
                    self._probed(host, probe, reason, own)
            return [h.name for h in todo]

    def all_down(self) -> bool:
        """Whether every listed host is down and holds no job: nothing can run now."""
        listed = self.listed()
        return bool(listed) and all(h.state == DOWN and not h.used for h in listed)

    def check_probes(self, now: float, own: SshSettings, python: str) -> None:
        """Take the answers of the probes that ended; probe the down hosts whose time has
        come, with ``own`` and ``python`` (a waiting job's; else the configuration's and
        the last job's)."""
        python = python or self._python or sys.executable
        for host in self.hosts():
            if host.probe is not None:
                reason = host.probe.result(0)
                if reason is not None:
                    self._probed(host, host.probe, reason, own)
            elif host.state == DOWN and host.listed and now >= host.retry_at:
                try:
                    host.probe = self._probe(host.name, own, python)
                except OSError as e:
                    self.went_down(host, f"cannot start ssh: {e}", own)

    def _probe(self, host: str, own: SshSettings, python: str) -> Probe:
        log = os.path.join(self.log_dir, f"probe-{host}-{next(here.jobs.ssh_probe_numbers)}.ssh")
        return Probe(host, ssh_base(own, log), python, log)

    def _probed(self, host: Host, probe: Probe, reason: str, own: SshSettings) -> None:
        """What ``probe`` of ``host`` found: it is up, or down (``reason``)."""
        try:
            os.unlink(probe.log_path)
        except OSError:
            pass
        host.probe = None
        if not reason:
            if host.state == DOWN:
                warn("ssh host %s answers again: jobs go to it again", host.name)
            host.up()
            host.checked.add(probe.python)
            return
        if host.state == NEW:
            warn("ssh host %s cannot take fiber's jobs (%s); it is tried again every %g s",
                 host.name, reason, own.retry_interval)
        self.went_down(host, reason, own)
