"""The size of a Slurm partition's nodes, from ``sinfo``: it chooses how many workers a
pool's job holds when the pool does not say (see fiber.pool._sizing)."""

from __future__ import annotations

import re
from typing import Optional

__all__ = ["SINFO_FORMAT", "smallest_node_cpus"]

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
