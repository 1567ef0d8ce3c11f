"""How many workers a pool's job holds when the pool does not say (fiber.pool._sizing),
and how each cluster backend reads the size of its nodes from its own tool's output
(the outputs below are those tools' formats; the engines' tests ask the real ones)."""

from __future__ import annotations

from typing import List, Optional

import pytest

from fiber.backends import Resources
from fiber.backends.kubernetes._pods import smallest_node_cpus as k8s_node_cpus
from fiber.backends.sge._status import smallest_host_cpus
from fiber.backends.slurm._nodes import smallest_node_cpus
from fiber.pool._sizing import AUTO_FROM, AUTO_MAX, workers_per_job


def _asked(answer: Optional[int], calls: List[int]):
    def node_cpus() -> Optional[int]:
        calls.append(1)
        return answer
    return node_cpus


@pytest.mark.parametrize("asked, workers, cpu, node, expected", [
    (3, 1000, None, 64, 3),            # the pool says: as it says
    (1, 1000, None, 64, 1),
    (0, AUTO_FROM - 1, None, 64, 1),   # small: a job a worker
    (0, AUTO_FROM, None, 64, 64),      # one-CPU workers on nodes of 64
    (0, 10000, None, 32, 32),
    (0, 10000, 2, 64, 32),             # workers of 2 CPUs: 32 fit
    (0, 10000, 0.25, 64, AUTO_MAX),    # 256 would fit: at most 64
    (0, 10000, 1 / 32, 2, 64),         # the test cluster's nodes of 2 CPUs
    (0, 10000, 4, 2, 1),               # larger than a node: 1 (the cluster says no)
    (0, 10000, None, None, 1),         # node size unknown: a job a worker
    (0, 10000, None, 0, 1),
])
def test_the_pool_chooses_from_its_size_and_the_nodes(asked, workers, cpu, node, expected):
    calls: List[int] = []
    assert workers_per_job(asked, workers, Resources(cpu=cpu), _asked(node, calls)) == expected
    assert len(calls) == (1 if asked == 0 and workers >= AUTO_FROM else 0)  # asked if needed


@pytest.mark.parametrize("resources", [Resources(memory_mb=2048), Resources(gpu=1),
                                       Resources(cpu=1, memory_mb=512)])
def test_workers_that_ask_for_memory_or_gpus_keep_a_job_each(resources):
    """A job of K workers asks K times their memory and GPUs: no node's are asked."""
    assert workers_per_job(0, 10000, resources, lambda: 64) == 1


def test_slurm_sinfo_lines():
    out = "debug*|2\nwide|8\nwide|4+\nurgent|16\n"
    assert smallest_node_cpus(out, "") == 2  # the default partition, marked *
    assert smallest_node_cpus(out, "wide") == 4  # its smallest node
    assert smallest_node_cpus(out, "gpu") is None
    assert smallest_node_cpus("", "") is None


def test_grid_engine_qhost_table():
    out = """\
HOSTNAME                ARCH         NCPU NSOC NCOR NTHR  LOAD  MEMTOT  MEMUSE  SWAPTO  SWAPUS
----------------------------------------------------------------------------------------------
global                  -               -    -    -    -     -       -       -       -       -
node1                   lx-amd64        8    1    4    8  0.01    7.6G  512.0M     0.0     0.0
node2                   lx-amd64        4    1    2    4  0.03    3.8G  400.0M     0.0     0.0
node3                   -               -    -    -    -     -       -       -       -       -
"""
    assert smallest_host_cpus(out) == 4
    assert smallest_host_cpus("error: cannot reach qmaster\n") is None


def test_kubernetes_allocatable_cpus():
    nodes = [{"status": {"allocatable": {"cpu": "7910m"}}},
             {"status": {"allocatable": {"cpu": "16"}}},
             {"spec": {"unschedulable": True}, "status": {"allocatable": {"cpu": "1"}}},
             {"status": {}}]
    assert k8s_node_cpus(nodes) == 6  # 7.9 allocatable: 7 whole, one left to the node
    assert k8s_node_cpus([]) is None


def test_ssh_nodes_are_its_hosts_slots():
    import fiber
    from fiber.backends import get_backend

    with fiber.config.override(ssh_hosts="node1:40,node2:8,node3:16"):
        assert get_backend("ssh").node_cpus() == 8
    with fiber.config.override(ssh_hosts=""):
        assert get_backend("ssh").node_cpus() is None


def test_local_and_a_large_pool_keep_a_job_a_worker():
    from fiber.backends import get_backend

    assert get_backend("local").node_cpus() is None


def test_hosts_to_avoid_are_best_effort():
    """A pool's suspected hosts are kept off as far as the scheduler has others: all of
    them suspected, none is (the job would never start); unknown names are dropped."""
    from fiber.backends._common import hosts_to_avoid
    from fiber.backends.slurm._nodes import node_list_command

    assert hosts_to_avoid({"node1", "elsewhere"}, ["node1", "node2"]) == ["node1"]
    assert hosts_to_avoid({"node1", "node2"}, ["node1", "node2"]) == []
    assert hosts_to_avoid(set(), ["node1"]) == []
    assert node_list_command("wide")[-1] == "--partition=wide"
