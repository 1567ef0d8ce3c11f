"""Network-namespace "hosts" for the tests that need several (fiber.testing.netns)."""

from __future__ import annotations

from typing import Any

from fiber.testing.conformance.support.waiting import unusable


def start_hosts(n: int) -> Any:
    """``n`` hosts, started (the caller stops them); if they cannot be made here (no root,
    no iproute2), the test is unusable: skipped by hand, a failure under CI=true."""
    from fiber.testing.netns import Hosts

    hosts = Hosts(n)
    try:
        hosts.start()
    except Exception as e:
        unusable("the network-namespace hosts (root and iproute2)",
                 f"cannot create network-namespace hosts: {e}")
    return hosts


def stop_hosts(hosts: Any) -> None:
    """Stop ``hosts`` and check that nothing of theirs is left (namespaces, links)."""
    from fiber.testing import _hosts

    index = hosts.index
    hosts.stop()
    namespaces, links = _hosts._ours(index)
    assert not namespaces and not links, f"left behind: {namespaces} {links}"
