"""Pool overhead against multiprocessing.Pool, measured in the same run.

    .venv/bin/python benchmarks/pool_overhead.py [--quick] [--only SECTION ...]
        [--durations MS ...] [--modes rounds|batch ...]

1. Framework overhead (the Fiber paper's test): 5 workers, sleep tasks of 1 s, 100 ms,
   10 ms and 1 ms, sized so that the ideal total is 1 s; "rounds" (5 tasks, wait, repeat:
   the RL/ES step pattern) and "batch" (one map of all tasks). Pool start-up excluded.
2. No-op throughput: map with chunksize 1 over 20,000 tasks (tasks/s).
3. apply round trip: median and p99 over 2,000 calls.
4. A 10 MB and a 100 MB numpy array to a worker and back (MB/s).
5. CPU time of a 1 ms round (section 1's rounds), in the master and in the workers: on a
   machine with few cores, what a round costs in CPU bounds how fast rounds can go.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time
from typing import List

import numpy as np
import psutil
from _common import latencies, table, timed

import fiber

WORKERS = 5


def sleep_task(seconds: float) -> None:
    time.sleep(seconds)


def noop(x: int) -> int:
    return x


def echo(a: np.ndarray) -> np.ndarray:
    return a


def overhead(pool, duration: float, mode: str) -> float:
    total = int(round(1.0 / duration)) * WORKERS
    if mode == "batch":
        return timed(lambda: pool.map(sleep_task, [duration] * total, chunksize=1))
    rounds = total // WORKERS

    def run() -> None:
        for _ in range(rounds):
            pool.map(sleep_task, [duration] * WORKERS, chunksize=1)

    return timed(run)


def _sleep_loop(duration: float, count: int, go, out) -> None:
    go.wait()
    t = time.perf_counter()
    for _ in range(count):
        time.sleep(duration)
    out.put(time.perf_counter() - t)


def floor(duration: float) -> float:
    """The same sleeps in 5 plain processes, back to back, with no framework and no
    coordination at all: what ``time.sleep`` itself costs here (its timer slack and
    wake-up latency, ~70 us per 1 ms sleep on this VM), a bound no pool can beat."""
    ctx = multiprocessing.get_context("spawn")
    go, out = ctx.Event(), ctx.Queue()
    count = int(round(1.0 / duration))
    procs = [ctx.Process(target=_sleep_loop, args=(duration, count, go, out))
             for _ in range(WORKERS)]
    for p in procs:
        p.start()
    time.sleep(0.5)  # all started and waiting
    go.set()
    slowest = max(out.get() for _ in procs)
    for p in procs:
        p.join()
    return slowest


def _cpu(pids: List[int]) -> float:
    """CPU seconds (user + system) used so far by these processes."""
    return sum(sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids)


def round_cpu(pool, pids: List[int], rounds: int = 1000) -> List[float]:
    """Microseconds of CPU per 1 ms round: the master process (all its threads), the
    workers, and both."""
    me = [os.getpid()]
    m0, w0 = _cpu(me), _cpu(pids)
    for _ in range(rounds):
        pool.map(sleep_task, [0.001] * WORKERS, chunksize=1)
    master, workers = (_cpu(me) - m0) / rounds * 1e6, (_cpu(pids) - w0) / rounds * 1e6
    return [master, workers, master + workers]


def sleep_cpu(calls: int = 2000) -> float:
    """Microseconds of CPU that ``time.sleep(0.001)`` itself costs (timer, wake-up)."""
    t = time.process_time()
    for _ in range(calls):
        time.sleep(0.001)
    return (time.process_time() - t) / calls * 1e6


def warm(pool) -> None:
    for _ in range(3):
        pool.map(noop, range(WORKERS * 4), chunksize=1)


def main(sections: List[int], durations: List[float], modes: List[str]) -> None:
    mp = multiprocessing.get_context("spawn").Pool(WORKERS)
    fb = fiber.Pool(WORKERS)
    try:
        warm(mp)
        warm(fb)
        if 1 in sections:
            rows = []
            floors = {d: floor(d) for d in durations}
            for mode in modes:
                for d in durations:
                    m, f = overhead(mp, d, mode), overhead(fb, d, mode)
                    rows.append((mode, f"{d * 1000:g} ms", floors[d], m, f, f / m))
            table("1. framework overhead: seconds for an ideal 1 s of work (5 workers; floor:"
                  " the sleeps alone in 5 plain processes)",
                  ["mode", "task", "floor s", "multiprocessing s", "fiber s", "fiber/mp"], rows)
        if 2 in sections:
            n = 20_000
            m = n / timed(lambda: mp.map(noop, range(n), chunksize=1))
            f = n / timed(lambda: fb.map(noop, range(n), chunksize=1))
            table("2. no-op throughput, map(chunksize=1) over 20,000 tasks",
                  ["multiprocessing tasks/s", "fiber tasks/s", "fiber/mp"], [(m, f, f / m)])
        if 3 in sections:
            calls = 2000
            lm = latencies(lambda: mp.apply(noop, (1,)), calls)
            lf = latencies(lambda: fb.apply(noop, (1,)), calls)
            table("3. apply round trip over 2,000 calls (microseconds)",
                  ["", "multiprocessing", "fiber", "fiber/mp"],
                  [(k, lm[k] * 1e6, lf[k] * 1e6, lf[k] / lm[k]) for k in ("median", "p99")])
        if 4 in sections:
            rows = []
            for mb in (10, 100):
                a = np.random.rand(mb * 1024 * 1024 // 8)
                tm = timed(lambda a=a: mp.apply(echo, (a,)), 3)
                tf = timed(lambda a=a: fb.apply(echo, (a,)), 3)
                rows.append((f"{mb} MB", 2 * mb / tm, 2 * mb / tf, tm / tf))
            table("4. numpy array to a worker and back (MB/s, both directions counted)",
                  ["size", "multiprocessing MB/s", "fiber MB/s", "fiber/mp speed"], rows)
        if 5 in sections:
            m = round_cpu(mp, [p.pid for p in mp._pool])  # type: ignore[attr-defined]
            f = round_cpu(fb, [ws.process.pid for ws in fb._core.procs.values()])
            alone = sleep_cpu()
            table(f"5. CPU per 1 ms round of 5 tasks (microseconds; {os.cpu_count()} cores; "
                  f"time.sleep(0.001) alone costs {alone:.0f} us of CPU, "
                  f"{WORKERS * alone:.0f} per round)",
                  ["", "multiprocessing", "fiber", "fiber/mp"],
                  [(k, a, b, b / a) for k, a, b in zip(("master", "workers", "total"), m, f)])
    finally:
        mp.terminate()
        fb.terminate()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="leave out the 1 s tasks")
    parser.add_argument("--only", type=int, nargs="+", choices=[1, 2, 3, 4, 5],
                        default=[1, 2, 3, 4, 5], help="sections to run")
    parser.add_argument("--durations", type=float, nargs="+", metavar="MS",
                        help="task durations of section 1, in ms")
    parser.add_argument("--modes", nargs="+", choices=["rounds", "batch"],
                        default=["rounds", "batch"], help="modes of section 1")
    args = parser.parse_args()
    chosen = ([ms / 1000 for ms in args.durations] if args.durations
              else [0.1, 0.01, 0.001] if args.quick else [1.0, 0.1, 0.01, 0.001])
    main(args.only, chosen, args.modes)
