"""Where the ssh backend starts a job (``fiber.backends.ssh._hosts.HostTable.pick``): the
up host with the most free slots, but not a host the job is to avoid (a pool's suspected
hosts: cut off or silent, issue 45) while another up host is listed, even if that one has
no slot free now (the job waits for one rather than start where it is cut off)."""

from __future__ import annotations

from fiber.backends.ssh._hosts import HostTable


def table(*hosts: str) -> HostTable:
    t = HostTable()
    t.update([(name, 2) for name in hosts])
    for host in t.listed():
        host.up()
    return t


def test_the_host_with_the_most_free_slots_unless_it_is_avoided():
    t = table("node1", "node2", "node3")
    t.get("node2").used = 1
    assert t.pick(1, 10).name == "node1"
    assert t.pick(1, 10, frozenset({"node1"})).name == "node3"


def test_an_avoided_host_is_taken_only_when_every_up_host_is_avoided():
    t = table("node1", "node2")
    t.get("node2").used = 2  # full
    assert t.pick(1, 10, frozenset({"node1"})) is None  # waits for node2
    assert t.pick(1, 10, frozenset({"node1", "node2"})).name == "node1"
