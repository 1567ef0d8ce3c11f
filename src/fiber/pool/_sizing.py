"""How many workers a pool's cluster job holds when the pool does not say.

``workers_per_job=0`` (``pool_workers_per_job``'s default) lets the pool choose, once,
when it is made, from its size, each worker's CPU request and the size of the cluster's
nodes (`Backend.node_cpus`):

- a pool of fewer than ``AUTO_FROM`` (64) workers: a job a worker. The master's cost
  per worker is small at that size, a job of one CPU starts soonest (a cluster finds one
  free CPU sooner than K on one node), it fails alone, and it has no hop through a
  relay;
- a pool of ``AUTO_FROM`` workers or more, on a backend that knows the CPUs of its
  nodes (Slurm, Grid Engine with a parallel environment, Kubernetes, ssh): as many
  workers as fit the smallest node by their CPU request (``cpu``, 1 unless set), at most
  ``AUTO_MAX`` (64), at least 1; so a pool of 10,000 one-CPU workers on nodes of 64 CPUs
  is 157 jobs, not 10,000;
- where the node size is unknown (``local``, ``netns``, ``docker``: one machine; a
  backend that cannot ask), or the workers ask for memory or GPUs (a node's are not
  asked: a job of K workers asks K times theirs, which no node may have): a job a
  worker.
"""

from __future__ import annotations

from typing import Callable, Optional

from ..backends import Resources

__all__ = ["AUTO_FROM", "AUTO_MAX", "workers_per_job"]

#: Pools of fewer workers than this keep a job a worker unless they say otherwise.
AUTO_FROM = 64
#: The most workers a job holds when the pool chooses.
AUTO_MAX = 64


def workers_per_job(asked: int, workers: int, resources: Resources,
                    node_cpus: Callable[[], Optional[int]]) -> int:
    """The workers a job of a pool of ``workers``, each asking for ``resources``, holds:
    ``asked`` if it is 1 or more, else (0) as the module says; ``node_cpus`` is called
    only when it matters."""
    if asked >= 1:
        return asked
    if workers < AUTO_FROM or resources.memory_mb or resources.gpu:
        return 1
    cpu = resources.cpu
    node = node_cpus()
    if not node or node <= 0:
        return 1
    return max(1, min(AUTO_MAX, int(node // (cpu if cpu else 1))))
