"""Pools of hundreds to 1,024 workers: fiber against multiprocessing, in the same run.

For each size, and for each of ``multiprocessing.Pool`` and ``fiber.Pool`` (local backend):

- **start-up**: from ``Pool(n)`` until every worker runs a task. Each of ``n`` tasks marks a
  file with its pid and waits for a go signal (a file lock: no CPU spent waiting); the
  time is taken when ``n`` distinct workers have marked (the same measure for both pools;
  a pool that hands two tasks to one worker cannot finish it before the others start);
- **first result**: from ``Pool(n)`` until the first of those tasks could return;
- **round efficiency**: rounds of one 50 ms sleep per worker (an ES iteration); efficiency
  = 50 ms / the round's wall time (1.0 would be no overhead at all); and where a round's
  time goes (medians over the rounds): **last start**, from the map's call until the
  last task starts (handing out n tasks and waking n workers), and **tail**, from the
  end of the last task until the map returns (its result's way back);
- **master CPU per task** over the rounds (user + system time of the master process:
  multiprocessing's handler threads and fiber's hub are both in it), and **workers' CPU
  per task** (every descendant process: fiber's fork server and its jobs, multiprocessing's
  forked workers);
- **master RSS per worker**: the master's resident memory after start-up, less before,
  divided by ``n``.

With ``--repeat K`` each pool is measured K times at each size, the two alternating, and
every figure is the median of the K (a single start-up on a 2-CPU VM varies by ±15%).
The workers' marks go to ``/dev/shm`` (tmpfs) where it exists: on an ext4 file system
without a journal a file's creation right after many deletions (the previous pool's
marks) cost up to ~0.5 ms of CPU, charged to whichever pool came next.

Usage::

    python benchmarks/scale.py [--sizes 64,256,512,1024] [--rounds 10] [--repeat 3]
                               [--plot scale.png] [--json out.json]
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

sys.path.insert(0, os.path.dirname(__file__))
import psutil  # noqa: E402
from _common import table  # noqa: E402

import fiber  # noqa: E402

TASK_S = 0.05


def mark_and_wait(args: tuple) -> int:
    """Mark ``folder`` with this worker's pid, then wait for the go signal: a shared lock
    on the folder's ``go`` file, which the master holds exclusively until every worker
    has marked (a wait in the kernel, which costs the workers still starting no CPU).
    A POSIX record lock (``lockf``), not ``flock``: a forked worker inherits the master's
    descriptor, and with it an ``flock`` that closing the master's copy would not release."""
    folder, _ = args
    pid = os.getpid()
    with open(os.path.join(folder, str(pid)), "w"):
        pass
    with open(os.path.join(folder, "go")) as go:
        fcntl.lockf(go, fcntl.LOCK_SH)
    return pid


def nap(_: int) -> tuple:
    """A task of an ES round: 50 ms; returns when it started and ended (monotonic clock,
    one for every process of the machine)."""
    started = time.monotonic()
    time.sleep(TASK_S)
    return started, time.monotonic()


def _marks_dir() -> str:
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _descendants_cpu_s() -> float:
    """CPU time of every descendant process, from /proc/PID/schedstat (nanoseconds:
    psutil's cpu_times counts clock ticks, coarser than a worker's CPU for a round)."""
    total = 0
    for child in psutil.Process().children(recursive=True):
        try:
            with open(f"/proc/{child.pid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


def measure(make_pool: Callable[[int], Any], n: int, rounds: int) -> Dict[str, float]:
    """Start-up, first result, round efficiency, master CPU and memory of one pool."""
    gc.collect()
    rss0 = _rss_mb()
    folder = tempfile.mkdtemp(prefix="fiber-scale-", dir=_marks_dir())
    try:
        go = open(os.path.join(folder, "go"), "w")
        fcntl.lockf(go, fcntl.LOCK_EX)
        t0 = time.perf_counter()
        pool = make_pool(n)
        result = pool.map_async(mark_and_wait, [(folder, i) for i in range(n)], chunksize=1)
        first = None
        while True:
            marks = len(os.listdir(folder)) - 1
            if marks and first is None:
                first = time.perf_counter() - t0
            if marks >= n:
                break
            time.sleep(0.002)
        startup = time.perf_counter() - t0
        go.close()  # releases the lock: every task returns
        pids = result.get(timeout=600)
        assert len(set(pids)) == n, f"{len(set(pids))} distinct workers of {n}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rss = _rss_mb() - rss0
    pool.map(nap, range(n), chunksize=1)  # warm: every worker has the function
    cpu0, wcpu0, times, last_starts, tails = _cpu_s(), _descendants_cpu_s(), [], [], []
    for _ in range(rounds):
        t_start = time.monotonic()  # the tasks' clock (see nap)
        spans = pool.map(nap, range(n), chunksize=1)
        t_end = time.monotonic()
        times.append(t_end - t_start)
        last_starts.append(max(s for s, _ in spans) - t_start)
        tails.append(t_end - max(e for _, e in spans))
    cpu = _cpu_s() - cpu0
    wcpu = _descendants_cpu_s() - wcpu0
    pool.terminate()
    pool.join()
    mean_round = sum(times) / len(times)
    return {"startup_s": startup, "first_s": first or startup,
            "efficiency": TASK_S / mean_round, "round_s": mean_round,
            "last_start_ms": statistics.median(last_starts) * 1e3,
            "tail_ms": statistics.median(tails) * 1e3,
            "cpu_us_per_task": cpu / (rounds * n) * 1e6,
            "worker_cpu_us_per_task": wcpu / (rounds * n) * 1e6,
            "rss_kb_per_worker": rss * 1024 / n}


def _mp_pool(n: int) -> Any:
    return multiprocessing.get_context("fork").Pool(n)


def _fiber_pool(n: int) -> Any:
    return fiber.Pool(n)


def _plot(results: List[Dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, style in (("multiprocessing", "o--"), ("fiber", "s-")):
        rows = [r for r in results if r["pool"] == name]
        sizes = [r["workers"] for r in rows]
        left.plot(sizes, [r["startup_s"] for r in rows], style, label=name)
        right.plot(sizes, [r["efficiency"] for r in rows], style, label=name)
    left.set(xlabel="workers", ylabel="start-up (s)", title="Every worker running a task")
    right.set(xlabel="workers", ylabel="efficiency", ylim=(0, 1.05),
              title=f"Rounds of one {TASK_S * 1000:.0f} ms task per worker")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,256,512,1024")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=1,
                        help="measure each pool this many times a size; medians are shown")
    parser.add_argument("--only", choices=["multiprocessing", "fiber"])
    parser.add_argument("--plot", default="", help="write a PNG of the results here")
    parser.add_argument("--json", default="", help="write the results as JSON here")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"{os.cpu_count()} CPUs, open-file limit {soft}/{hard}, Python "
          f"{sys.version.split()[0]}, {args.rounds} rounds of {TASK_S * 1000:.0f} ms tasks")
    pools = [("multiprocessing", _mp_pool), ("fiber", _fiber_pool)]
    results: List[Dict[str, Any]] = []
    runs: List[Dict[str, Any]] = []
    for n in (int(s) for s in args.sizes.split(",")):
        for _ in range(args.repeat):
            for name, make in pools:
                if args.only and name != args.only:
                    continue
                r = measure(make, n, args.rounds)
                runs.append({"pool": name, "workers": n, **r})
                print(f"  {name:>15} {n:>5}: start-up {r['startup_s']:.2f} s, efficiency "
                      f"{r['efficiency']:.2f}", flush=True)
        for name, _ in pools:
            mine = [r for r in runs if r["pool"] == name and r["workers"] == n]
            if mine:
                results.append({"pool": name, "workers": n, "runs": len(mine),
                                **{k: statistics.median(r[k] for r in mine)
                                   for k in mine[0] if k not in ("pool", "workers")}})
    rows = []
    for r in results:
        rows.append([r["workers"], r["pool"], r["startup_s"], r["first_s"], r["efficiency"],
                     r["last_start_ms"], r["tail_ms"], r["cpu_us_per_task"],
                     r["worker_cpu_us_per_task"], r["rss_kb_per_worker"]])
    table(f"Pools at size (medians of {args.repeat} runs; start-up: every worker running "
          "a task)",
          ["workers", "pool", "start-up s", "first s", "efficiency", "last start ms",
           "tail ms", "master CPU us/task", "workers CPU us/task", "master KB/worker"], rows)
    by_size: Dict[int, Dict[str, Dict[str, Any]]] = {}
    for r in results:
        by_size.setdefault(r["workers"], {})[r["pool"]] = r
    ratios = []
    for n, p in by_size.items():
        if len(p) != 2:
            continue
        pairs = list(zip([r for r in runs if r["workers"] == n and r["pool"] == "multiprocessing"],
                         [r for r in runs if r["workers"] == n and r["pool"] == "fiber"]))
        startup = sorted(f["startup_s"] / m["startup_s"] for m, f in pairs)
        efficiency = sorted(f["efficiency"] / m["efficiency"] for m, f in pairs)
        ratios.append([n, p["fiber"]["startup_s"] / p["multiprocessing"]["startup_s"],
                       f"{startup[0]:.2f}-{startup[-1]:.2f}",
                       p["fiber"]["efficiency"] / p["multiprocessing"]["efficiency"],
                       f"{efficiency[0]:.2f}-{efficiency[-1]:.2f}"])
    if ratios:
        table("fiber / multiprocessing (of the medians; the range: of each run's pair)",
              ["workers", "start-up ratio", "range", "efficiency ratio", "range"], ratios)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"medians": results, "runs": runs}, f, indent=1)
    if args.plot:
        _plot(results, args.plot)
        print(f"\nplot written to {args.plot}")


if __name__ == "__main__":
    main()
