"""A Slurm partition's nodes, from ``sinfo``: their size chooses how many workers a pool's
job holds when the pool does not say (see fiber.pool._sizing); their names, which of a
pool's suspected hosts a job can be kept off."""

from __future__ import annotations

import re
from typing import List, Optional

__all__ = ["SINFO_FORMAT", "smallest_node_cpus", "node_list_command"]

#: ``sinfo -h -o`` of a line a partition and node size: ``debug*|2``.
SINFO_FORMAT = "%P|%c"


def smallest_node_cpus(sinfo: str, partition: str) -> Optional[int]:
    """The CPUs of the smallest node of ``partition`` (the default partition, marked
    ``*``, if empty) in ``sinfo``'s lines of `SINFO_FORMAT` (a partition whose nodes
    differ has a line for each size; ``2+`` reads as 2); None if it has no line."""
    found = []
    for line in sinfo.splitlines():
        name, sep, cpus = line.strip().partition("|")
        default = name.endswith("*")
        name = name.rstrip("*")
        digits = re.match(r"\d+", cpus.strip())
        if sep and digits and (name == partition if partition else default):
            found.append(int(digits.group()))
    return min(found) if found else None


def node_list_command(partition: str) -> List[str]:
    """``sinfo`` listing the nodes of ``partition`` (of all, if empty), a name a line."""
    return ["sinfo", "-h", "-N", "-o", "%N", *([f"--partition={partition}"] if partition else [])]
