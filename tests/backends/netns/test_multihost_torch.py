"""PyTorch's DataLoader with workers on network-namespace hosts (``mh_torch_loader.py``).

Same approach as ``test_multihost.py``, whose ``hosts`` fixture and ``run_scenario`` this
module reuses. torch collates a worker's batch into shared memory, which another host
cannot map: fiber's queue sends it by value, and the master gets a copy.
"""

from __future__ import annotations

import re

import pytest
from test_multihost import hosts, run_scenario  # noqa: F401 - the module's fixture

from fiber_ci import netns

pytestmark = [pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:This DataLoader will create")]


def test_dataloader_workers_on_hosts_give_the_stdlib_batches(hosts: netns.Hosts) -> None:  # noqa: F811
    r = run_scenario(hosts, "mh_torch_loader.py")
    assert r["worker_hosts"] == r["expected_hosts"]  # one worker on each host
    assert r["same"]  # items, order and the workers' seeded draws
    assert r["shared"] == [False] and r["stdlib_shared"] == [True]  # a copy, not shm
    assert r["worker_exitcodes"] == [0, 0, 0]
    killed = r["killed"]
    assert killed["victim_host"] == r["expected_hosts"][1]
    assert re.match(rf"DataLoader worker \(pid(\(s\))? {killed['victim_pid']}\) ",
                    killed["error"]), killed
    assert killed["seconds"] < 30  # its check every 5 s: not a hang
    assert killed["exitcodes"] == [0, -9, 0]
