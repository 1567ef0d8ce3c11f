"""Synchronization primitives and managers across network-namespace hosts.

Same approach as ``test_multihost.py`` (whose ``hosts`` fixture and ``run_scenario`` this
module reuses): each scenario is a script under ``tests/backends/netns/scripts/`` run in a
fresh interpreter, with the master in the root namespace and processes on three hosts.
"""

from __future__ import annotations

from test_multihost import hosts, run_scenario  # noqa: F401 - the module's fixture

from fiber.transport.client import SPENT_GRACE_CONNECT_S
from fiber.transport.receipts import REANCHOR_WAIT_S
from fiber.transport.server import JOB_END_SETTLE_S

from fiber_ci import netns


def test_counters_under_locks_are_exact_across_hosts(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_sync_counter.py")
    assert r["managed"] == r["value"] == r["expected"]
    assert r["worker_ips"] == r["host_ips"]  # two workers on each host
    h1 = r["host_ips"][0]
    assert r["manager_address"].startswith(f"tcp://{h1}:")  # the manager ran on host 1
    assert r["exitcodes"] == [0] * 6


def test_barrier_and_event_across_hosts(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_sync_barrier_event.py")
    assert r["indices"] == [0, 1, 2, 3]
    assert r["party_ips"] == r["host_ips"]
    assert r["action_runs"] == 1
    assert r["action_ip"] in r["host_ips"] + [hosts.root_ip]
    assert r["woken"] == [True, True, True] and r["wake_seconds"] < 10
    assert r["exitcodes"] == [0, 0, 0]


def test_lock_released_when_holder_dies_on_another_host(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_sync_lock_death.py")
    h1, h2, h3 = r["host_ips"]
    assert r["held_elsewhere"] and r["holder_ip"] == h2 and r["holder_exit"] == -9
    assert r["master_got"] and r["master_seconds"] < 5
    assert r["server_ip"] == h1 and r["holder3_ip"] == h3 and r["taker_ip"] == h2
    assert r["taker_waited"] and r["taker_got"]


def test_lock_of_a_holder_killed_on_a_silent_host_is_released_when_its_job_ends(
        hosts: netns.Hosts) -> None:  # noqa: F811
    """Host 2 cut off, then the lock's holder on it killed: no end of its connections
    reaches the master (a Kubernetes pod whose network went first). Its backend says
    the job ended, and the lock is released a moment later, not after the grace
    (``heartbeat_timeout``) it would take the silence to tell."""
    try:
        r = run_scenario(hosts, "mh_sync_lock_death.py", "--silent", hosts.veth(2),
                         env={"FIBER_HEARTBEAT_TIMEOUT": "12"})
    finally:
        hosts.partition(2, False)
    assert r["grace"] == 12, r
    assert r["held_elsewhere"] and r["holder_exit"] == -9, r
    assert r["master_got"] and r["master_seconds"] < JOB_END_SETTLE_S + 3, r  # was 12.1 s


def test_manager_killed_mid_call_fails_callers(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_sync_manager_kill.py")
    h1, h2, _ = r["host_ips"]
    assert r["manager_ip"] == h1 and r["client_ip"] == h2
    assert r["child"][0].startswith("ConnectionLost") and r["child"][1] < 10, r
    assert r["master"][0].startswith("ConnectionLost") and r["master"][1] < 10, r
    assert r["child_exit"] == 0 and r["seconds"] < 15


def test_manager_whose_host_goes_silent_fails_callers_after_one_grace(
        hosts: netns.Hosts) -> None:  # noqa: F811
    """Host 1 cut off, then its manager killed: the callers hear nothing. They give up
    once the grace (``heartbeat_timeout``) is out, plus one short try to connect again
    (``SPENT_GRACE_CONNECT_S``), not a second grace spent connecting to a host that has
    been silent all along (a Kubernetes run took over 60 s with a 30 s grace)."""
    try:
        r = run_scenario(hosts, "mh_sync_manager_kill.py", "--silent", hosts.veth(1),
                         env={"FIBER_HEARTBEAT_TIMEOUT": "12"})
    finally:
        hosts.partition(1, False)
    assert r["grace"] == 12, r
    bound = 12 + SPENT_GRACE_CONNECT_S + 3
    for caller in ("child", "master"):
        said, seconds = r[caller]
        assert said.startswith("ConnectionLost"), r
        assert 12 - 1 < seconds < bound, r
    assert r["child_exit"] == 0, r


def test_async_manager_objects_on_hosts(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_sync_async.py")
    assert r["reverse_ok"]
    assert r["pids"] == 3 and set(r["ips"]) <= set(r["host_ips"])
    assert r["parallel_seconds"] < 2.5
    assert r["error"] == ["ValueError", "remote failure", True]


def test_a_lock_holder_counted_gone_that_comes_back_is_told_and_frees_nothing(
        hosts: netns.Hosts) -> None:  # noqa: F811
    """Host 2 cut off and its connections to the master aborted while a process on it
    holds the master's lock: the hub counts that process gone after ``REANCHOR_WAIT_S``
    and the master takes the lock. Host 2 comes back, its process lives, and its release raises
    `LockLostError` and leaves the master's lock alone; before, it freed it (and the
    master's own release raised ``ValueError``). Its ``acquire`` of a second lock so
    taken raises `LockLostError` as well, and leaves it no longer counting that lock its
    own (before, its repr still named it the owner). The grace (``heartbeat_timeout``) is
    60 s: the cut, longer than that wait, must not be taken for a silent host's."""
    try:
        r = run_scenario(hosts, "mh_lock_taken.py", "--veth", hosts.veth(2),
                         env={"FIBER_HEARTBEAT_TIMEOUT": "60"})
    finally:
        hosts.partition(2, False)
    assert r["holder"] == "held" and r["holder_ip"] == r["host_ips"][1], r
    assert r["aborted"] >= 1, r
    assert r["master_got"] and r["master_seconds"] < REANCHOR_WAIT_S + 10, r
    assert r["told"][0] == "LockLostError" and "taken from this thread" in r["told"][1], r
    assert r["master_got_again"], r
    assert r["told_again"] == ["LockLostError", "<Lock(owner=SomeOtherProcess)>"], r
    assert r["master_released"] == "ok", r
    assert r["holder_exit"] == 0, r
