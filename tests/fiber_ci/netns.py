"""Several "hosts" on one Linux machine, and the ``netns`` backend that runs jobs on them.

`Hosts` creates N network namespaces joined by a Linux bridge (root only).

Partitions, lossy links and the ``netns`` backend: docs/contributing/ci-tools.md."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Sequence, Tuple, Union

from fiber.backends import JobHandle, JobSpec, register_backend
from fiber.backends._job_command import JOB_HOST_ENV, bootstrap_parts
from fiber.backends.local import LocalBackend
from fiber.errors import SubmitError

from . import HOME
from ._hosts import HOSTS_ENV, NETWORK, HostList, Hosts
from ._namespaces import cleanup_stale

__all__ = [
    "Hosts",
    "NetnsBackend",
    "use_hosts",
    "current_hosts",
    "on_host",
    "cleanup_stale",
    "HOSTS_ENV",
    "NETWORK",
]


# -- the backend --------------------------------------------------------------------------

_current: Optional[HostList] = None
_current_lock = threading.Lock()
_pin = threading.local()


def use_hosts(hosts: Union[Hosts, HostList, None]) -> None:
    """Make ``hosts`` (started `Hosts`) the ones netns jobs run on; None: forget.

    Also sets ``FIBER_NETNS_HOSTS`` in this process's environment, so that programs it
    starts (a test's helper script, say) find the hosts too.
    """
    global _current
    with _current_lock:
        if hosts is None:
            _current = None
            os.environ.pop(HOSTS_ENV, None)
            return
        if isinstance(hosts, Hosts):
            _current = hosts.host_list()
        elif isinstance(hosts, HostList):
            _current = hosts
        else:
            raise TypeError(f"expected fiber_ci.netns.Hosts, got {hosts!r}")
        os.environ[HOSTS_ENV] = _current.to_env()


def current_hosts() -> Optional[HostList]:
    """The hosts installed by `use_hosts`, else those inherited from the parent."""
    global _current
    with _current_lock:
        if _current is None and os.environ.get(HOSTS_ENV):
            _current = HostList.from_env(os.environ[HOSTS_ENV])
        return _current


@contextlib.contextmanager
def on_host(i: int) -> Iterator[None]:
    """Within the block, netns jobs this thread starts run on host ``i`` (1-based)."""
    before = getattr(_pin, "host", None)
    _pin.host = i
    try:
        yield
    finally:
        _pin.host = before


# A job imports this module first, so that it knows the netns backend too (it may start
# processes of its own), from the checkout's tests/ (not in the package: its sys.path is
# not its master's yet); the rest is what ``python -m fiber.process._bootstrap`` does.
_BOOTSTRAP = (f"import sys; sys.path.insert(0, {HOME!r}); import fiber_ci.netns; "
              "from fiber.process._bootstrap import main; main()")


def _with_import(command: Sequence[str]) -> Tuple[str, ...]:
    parts = bootstrap_parts(command)
    if parts is not None:
        return (parts[0], *parts[1], "-c", _BOOTSTRAP)
    return tuple(command)


class NetnsBackend(LocalBackend):
    """Run jobs as subprocesses inside the netns hosts, round robin."""

    name = "netns"
    #: Its jobs stand for processes of other hosts: they reach this one over TCP only.
    passes_fds = False
    jobs_share_network = False

    #: How many hosts `test_engine` starts.
    TEST_HOSTS = 3

    @classmethod
    @contextlib.contextmanager
    def test_engine(cls) -> Iterator[Dict[str, Any]]:
        """The engine of a test session (``fiber.testing.conformance``): `TEST_HOSTS`
        hosts started and installed with `use_hosts`; yields the settings fiber needs,
        the master's address on their bridge (``listen_host``); stops them after.

        Raises:
            RuntimeError: the hosts cannot be made here (no root, no iproute2).
        """
        with Hosts(cls.TEST_HOSTS) as hosts:
            use_hosts(hosts)
            try:
                yield {"listen_host": hosts.root_ip}
            finally:
                use_hosts(None)

    def __init__(self) -> None:
        super().__init__()
        self._rr = itertools.count()
        self._rr_lock = threading.Lock()
        self._placed = threading.local()

    def _hosts(self) -> HostList:
        hosts = current_hosts()
        if hosts is None:
            raise SubmitError("the netns backend has no hosts: start "
                              "fiber_ci.netns.Hosts and call use_hosts(hosts) first")
        return hosts

    def command_prefix(self, spec: JobSpec, index: int) -> List[str]:
        """``ip netns exec <host> env FIBER_JOB_HOST=<host>``: the next host round robin
        but those of ``spec.avoid_hosts`` (while another is left), or the one `on_host`
        chose.

        Raises:
            SubmitError: no hosts are installed, or the chosen host does not exist.
        """
        hosts = self._hosts()
        pinned: Optional[int] = getattr(_pin, "host", None)
        i = pinned if pinned is not None else self._next_host(hosts, spec.avoid_hosts)
        try:
            prefix = hosts.exec_prefix(i)
        except IndexError as e:
            raise SubmitError(f"cannot place job: {e}") from None
        self._placed.host = name = hosts.hosts[i - 1][0]
        # the host the job reports (Process.host, its output's prefix, a lost worker's
        # warning): its namespace, not the machine's name, which every host shares
        return [*prefix, "env", f"{JOB_HOST_ENV}={name}"]

    def _next_host(self, hosts: HostList, avoid: FrozenSet[str]) -> int:
        """The next host round robin (1-based), but those in ``avoid`` while another is
        left."""
        n = len(hosts.hosts)
        with self._rr_lock:
            for _ in range(n):
                i: int = next(self._rr) % n + 1
                if hosts.hosts[i - 1][0] not in avoid:
                    return i
        return i

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Start each job in a host, with the host list in its environment (its own
        children go on the hosts too); ``JobHandle.host`` is the host's namespace.

        Raises:
            SubmitError: no hosts are installed, or the job cannot start.
        """
        env_value = self._hosts().to_env()
        handles = []
        for spec in specs:
            spec = dataclasses.replace(spec, command=_with_import(spec.command),
                                       env={**spec.env, HOSTS_ENV: env_value})
            self._placed.host = ""
            (handle,) = super().submit([spec])
            handle.host = self._placed.host
            handles.append(handle)
        return handles

    def listen_host(self) -> str:
        """The root namespace's address on the bridge.

        Raises:
            RuntimeError: no hosts are installed (``use_hosts``).
        """
        hosts = current_hosts()
        if hosts is None:
            raise RuntimeError("the netns backend has no hosts: start fiber_ci.netns."
                               "Hosts and call use_hosts(hosts) before using fiber")
        return hosts.root_ip


register_backend("netns", NetnsBackend)
