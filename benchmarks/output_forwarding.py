"""What forwarding the workers' output costs a pool whose tasks print (issue 19).

    .venv/bin/python benchmarks/output_forwarding.py [--tasks N] [--workers W ...]
        [--repeat R] [--work-us US]

A map with chunksize 1 whose every task prints one line (and does ``--work-us`` of
busy work first), with ``forward_output`` on (each line sent to the master, prefixed and
written by it; local jobs also write their own log file) and off (local jobs write to the
master's stdout themselves, as subprocesses do), and, for scale, the same map of tasks
that print nothing. Tasks per second, best of ``--repeat`` runs, pool start excluded.
While it measures, this process's stdout (fd 1, which the jobs inherit with forwarding
off) is /dev/null: the terminal's speed is not what is measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import List

from _common import table, timed

import fiber


def chatty(x: int, work_us: float = 0.0) -> int:
    if work_us:
        end = time.perf_counter() + work_us * 1e-6
        while time.perf_counter() < end:
            pass
    print(f"task {x} says hello from its worker")
    return x


def quiet(x: int, work_us: float = 0.0) -> int:
    if work_us:
        end = time.perf_counter() + work_us * 1e-6
        while time.perf_counter() < end:
            pass
    return x


def run(workers: int, tasks: int, forward: bool, fn, work_us: float, repeat: int) -> float:
    import functools

    with fiber.config.override(forward_output=forward):
        with fiber.Pool(workers) as pool:
            task = functools.partial(fn, work_us=work_us)
            pool.map(task, range(workers * 4), chunksize=1)  # every worker connected
            seconds = timed(lambda: pool.map(task, range(tasks), chunksize=1), repeat)
    return tasks / seconds


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 32])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--work-us", type=float, default=0.0)
    args = parser.parse_args(argv)
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    rows = []
    try:
        for workers in args.workers:
            sys.stdout.flush()
            os.dup2(devnull, 1)
            try:
                quiet_rate = run(workers, args.tasks, True, quiet, args.work_us, args.repeat)
                on = run(workers, args.tasks, True, chatty, args.work_us, args.repeat)
                off = run(workers, args.tasks, False, chatty, args.work_us, args.repeat)
            finally:
                sys.stdout.flush()
                os.dup2(saved, 1)
            rows.append((workers, args.tasks, round(quiet_rate), round(off), round(on),
                         f"{on / off:.2f}"))
    finally:
        os.close(devnull)
    table(f"tasks/s of map(print one line), chunksize 1, {args.work_us:g} us of work a task "
          f"(best of {args.repeat}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})",
          ["workers", "tasks", "silent", "forwarding off", "forwarding on", "on/off"], rows)


if __name__ == "__main__":
    main(sys.argv[1:])
