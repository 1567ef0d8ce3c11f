"""Network-namespace "hosts" for the tests that need several (fiber_ci.netns)."""

from __future__ import annotations

from typing import Any

from fiber.testing.conformance.support.waiting import unusable


def start_hosts(n: int) -> Any:
    """``n`` hosts, started (the caller stops them); if they cannot be made here (no root,
    no iproute2), the test is unusable: skipped by hand, a failure under CI=true."""
    from fiber_ci.netns import Hosts

    hosts = Hosts(n)
    try:
        hosts.start()
    except Exception as e:
        unusable("the network-namespace hosts (root and iproute2)",
                 f"cannot create network-namespace hosts: {e}")
    return hosts


def stop_hosts(hosts: Any) -> None:
    """Stop ``hosts`` and check that nothing of theirs is left (namespaces, links)."""
    from fiber_ci import _namespaces

    index = hosts.index
    hosts.stop()
    namespaces, links = _namespaces.ours(index)
    assert not namespaces and not links, f"left behind: {namespaces} {links}"


#: What the master says of a worker that came back after a reset (one INFO line each,
#: which may say "tasks ... lost in flight" or "nothing was lost").
RESUMED = "connected again after its connection was reset"


def said_lost(stderr: str) -> bool:
    """Whether the master said, outside its resume lines, that something was lost or a
    process is gone (a worker lost, a lifeline ended)."""
    others = "\n".join(ln for ln in stderr.splitlines() if RESUMED not in ln)
    return "lost" in others or "is gone" in others
