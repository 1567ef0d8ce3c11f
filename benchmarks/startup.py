"""Start-up latency of fiber's local backend, next to ``multiprocessing``.

Measured, each in a fresh interpreter (``cold``: the master's first pool or process, so a
fork server, when enabled, is started inside the measured time) and again in one process
(``warm``: later pools and processes of the same master):

- ``fiber.Pool(5)``: from the constructor call until all 5 workers are connected to the
  pool (polled every millisecond), and until 5 distinct worker pids have answered a task;
- ``multiprocessing.Pool(5)`` with the ``spawn`` and ``fork`` contexts: until 5 distinct
  worker pids have answered a task (tasks sleep 2 ms so that one worker cannot take them
  all);
- ``Process(target=noop).start(); join()`` for fiber and both multiprocessing contexts.

Usage::

    python benchmarks/startup.py [--runs 5] [--preload numpy]

``--no-fork-server`` measures fiber with ``local_fork_server=False`` (the subprocess path);
``--preload numpy`` imports numpy in the master first; ``--worker-import numpy`` makes
every worker import numpy before it counts as started (pool initializer, process target),
as workers of a numpy program do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

POOL_SIZE = 5


WORKER_IMPORTS: List[str] = []


def import_all(names: List[str]) -> None:
    for name in names:
        __import__(name)


def noop(names: List[str]) -> None:
    import_all(names)


def pid_after(delay: float) -> int:
    time.sleep(delay)
    return os.getpid()


def _until_pids(imap_unordered: Any, t0: float) -> float:
    seen = set()
    it = imap_unordered(pid_after, [0.002] * 100_000, chunksize=1)
    for pid in it:
        seen.add(pid)
        if len(seen) >= POOL_SIZE:
            return time.perf_counter() - t0
    raise RuntimeError("the pool ran out of tasks before every worker answered")


def fiber_pool_connected() -> float:
    import fiber

    t0 = time.perf_counter()
    pool = fiber.Pool(POOL_SIZE, initializer=import_all, initargs=(WORKER_IMPORTS,))
    try:
        core = pool._core
        while len([w for w in list(core.service.workers.values()) if w.connected]) < POOL_SIZE:
            if core.broken is not None:
                raise RuntimeError(f"the pool broke while starting: {core.broken}")
            if time.perf_counter() - t0 > 120:
                raise RuntimeError("the pool's workers did not all connect within 120 s")
            time.sleep(0.001)
        return time.perf_counter() - t0
    finally:
        pool.terminate()


def fiber_pool_answered() -> float:
    import fiber

    t0 = time.perf_counter()
    pool = fiber.Pool(POOL_SIZE, initializer=import_all, initargs=(WORKER_IMPORTS,))
    try:
        return _until_pids(pool.imap_unordered, t0)
    finally:
        pool.terminate()


def mp_pool_answered(method: str) -> float:
    import multiprocessing

    ctx = multiprocessing.get_context(method)
    t0 = time.perf_counter()
    pool = ctx.Pool(POOL_SIZE, initializer=import_all, initargs=(WORKER_IMPORTS,))
    try:
        return _until_pids(pool.imap_unordered, t0)
    finally:
        pool.terminate()
        pool.join()


def fiber_process() -> float:
    import fiber

    t0 = time.perf_counter()
    p = fiber.Process(target=noop, args=(WORKER_IMPORTS,))
    p.start()
    p.join()
    assert p.exitcode == 0, p.exitcode
    return time.perf_counter() - t0


def mp_process(method: str) -> float:
    import multiprocessing

    ctx = multiprocessing.get_context(method)
    t0 = time.perf_counter()
    p = ctx.Process(target=noop, args=(WORKER_IMPORTS,))
    p.start()
    p.join()
    assert p.exitcode == 0, p.exitcode
    return time.perf_counter() - t0


CASES = {
    "fiber Pool(5) all connected": fiber_pool_connected,
    "fiber Pool(5) 5 pids answered": fiber_pool_answered,
    "mp spawn Pool(5) 5 pids answered": lambda: mp_pool_answered("spawn"),
    "mp fork Pool(5) 5 pids answered": lambda: mp_pool_answered("fork"),
    "fiber Process start+join": fiber_process,
    "mp spawn Process start+join": lambda: mp_process("spawn"),
    "mp fork Process start+join": lambda: mp_process("fork"),
}


def _setup(args: argparse.Namespace) -> None:
    import_all(args.preload)
    WORKER_IMPORTS[:] = args.worker_import
    import fiber

    if _has_fork_server_key():  # absent before the fork server existed
        fiber.init(local_fork_server=not args.no_fork_server)


def _has_fork_server_key() -> bool:
    import fiber.config

    return "local_fork_server" in fiber.config._FIELDS


def _child(args: argparse.Namespace) -> None:
    """Run one case ``args.runs`` times in this process; print the times as JSON."""
    _setup(args)
    fn = CASES[args.case]
    print(json.dumps([fn() for _ in range(args.runs)]))


def _run_child(case: str, runs: int, args: argparse.Namespace) -> List[float]:
    argv = [sys.executable, os.path.abspath(__file__), "--child", case, "--runs", str(runs)]
    if args.no_fork_server:
        argv.append("--no-fork-server")
    for name in args.preload:
        argv += ["--preload", name]
    for name in args.worker_import:
        argv += ["--worker-import", name]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or [f"exit code {out.returncode}"]
        print(f"  a run of {case!r} failed: {lines[-1]}", flush=True)
        return []
    return [float(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]


def _fmt(times: List[float]) -> str:
    if not times:
        return "no successful run"
    ms = [t * 1000 for t in times]
    return (f"median {statistics.median(ms):6.0f} ms  min {min(ms):6.0f}  max {max(ms):6.0f}"
            f"  ({', '.join(f'{x:.0f}' for x in ms)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="measurements per case")
    parser.add_argument("--no-fork-server", action="store_true",
                        help="fiber with local_fork_server=False (subprocess jobs)")
    parser.add_argument("--preload", action="append", default=[],
                        help="import this module in the master first (e.g. numpy)")
    parser.add_argument("--worker-import", action="append", default=[],
                        help="every worker imports this module before it counts as started")
    parser.add_argument("--case", choices=sorted(CASES), action="append",
                        help="only these cases")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.case = args.child
        _child(args)
        return
    label = "subprocess jobs" if args.no_fork_server else "default config"
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, fiber: {label}, "
          f"imported by the master: {args.preload or 'nothing'}, by each worker: "
          f"{args.worker_import or 'nothing'}; {args.runs} runs each")
    results: Dict[str, Dict[str, List[float]]] = {}
    for case in args.case or list(CASES):
        cold = [t for _ in range(args.runs) for t in _run_child(case, 1, args)]
        warm = _run_child(case, args.runs + 1, args)[1:]
        results[case] = {"cold": cold, "warm": warm}
        print(f"{case:34s} cold {_fmt(cold)}")
        print(f"{'':34s} warm {_fmt(warm)}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
