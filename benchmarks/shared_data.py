"""A large array handed to every worker of a pool as ``initargs``: time and memory.

``fiber.Pool(n, initializer=keep, initargs=(table, queue))`` (the configured backend,
local by default), whose initializer sums the table (touching every page) and puts its
pid on the queue. Measured:

- the time from ``Pool(...)`` until every initializer has run;
- the master's peak RSS (``VmHWM``), against its RSS before the pool;
- the workers' PSS (``/proc/PID/smaps_rollup``: pages shared by k processes count 1/k in
  each): one copy of the table shared by all of them, or one each.

Usage::

    python benchmarks/shared_data.py [--processes 8] [--megabytes 100]
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Tuple

import numpy as np
from _common import rollup_mb  # type: ignore[import-not-found]

import fiber

_table: Any = None


def keep(table: np.ndarray, q: Any) -> None:
    global _table
    _table = table
    q.put((os.getpid(), float(table.sum())))


def peak_rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(processes: int, megabytes: int) -> Tuple[float, float, float, float]:
    table = np.random.default_rng(0).standard_normal(megabytes * 10**6 // 8)
    want = float(table.sum())
    before = peak_rss_mb()
    q = fiber.Queue()
    start = time.perf_counter()
    with fiber.Pool(processes, initializer=keep, initargs=(table, q)) as pool:
        reports = [q.get(timeout=600) for _ in range(processes)]
        seconds = time.perf_counter() - start
        if any(total != want for _, total in reports):
            raise SystemExit("a worker got other data")
        pss = sum(rollup_mb(pid)["Pss"] for pid, _ in reports)
        pool.close()
    return seconds, before, peak_rss_mb(), pss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--megabytes", type=int, default=100)
    args = parser.parse_args()
    seconds, before, peak, pss = measure(args.processes, args.megabytes)
    print(f"Pool({args.processes}), {args.megabytes} MB initarg, backend "
          f"{fiber.get_config().backend}: every initializer done in {seconds:.2f} s; master "
          f"peak RSS {peak:.0f} MB ({before:.0f} MB before the pool); workers' PSS "
          f"{pss:.0f} MB in all ({pss / args.processes:.0f} MB each)")


if __name__ == "__main__":
    main()
