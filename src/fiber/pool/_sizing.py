"""How many workers a pool's cluster job holds when the pool does not say: a job a worker
in a pool of fewer than 64, else as many as fit the smallest node by their CPU request,
where the backend knows its nodes. The rules: docs/contributing/pools.md, "Sizing"."""

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
