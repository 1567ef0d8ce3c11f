"""Helpers shared by the benchmarks: timing, tables, the two pools measured side by side."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Callable, Dict, List, Sequence


def timed(fn: Callable[[], object], repeat: int = 1) -> float:
    """Best wall time of ``repeat`` runs, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def latencies(fn: Callable[[], object], n: int) -> Dict[str, float]:
    samples: List[float] = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    samples.sort()
    return {"median": statistics.median(samples), "p99": samples[int(0.99 * (n - 1))]}


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    print(f"\n{title}")
    cells = [[str(c) for c in header]] + [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for i, row in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if i == 0:
            print("  " + "  ".join("-" * w for w in widths))
    sys.stdout.flush()


def _fmt(c: object) -> str:
    if isinstance(c, float):
        return f"{c:.3f}" if c < 100 else f"{c:.0f}"
    return str(c)


def rollup_mb(pid: int) -> Dict[str, float]:
    """The fields of ``/proc/PID/smaps_rollup`` in MB (``Pss``: the pages shared by k
    processes count 1/k in each).

    Raises:
        OSError: no such process (any more).
    """
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            field = line.split()
            if len(field) >= 2 and field[0].endswith(":") and field[1].isdigit():
                out[field[0][:-1]] = int(field[1]) / 1024
    return out
