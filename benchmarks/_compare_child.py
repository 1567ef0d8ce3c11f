"""The program ``compare.py`` times: one benchmark, one fiber install, one run.

    python _compare_child.py BENCH [--calls N] [--tasks N] [--workers N]

It uses only fiber's public, multiprocessing-shaped API (``fiber.Pool``, ``fiber.Pipe``,
``fiber.Process``) and the standard library, so that it runs unchanged against any commit
of fiber, old layouts included: whichever fiber the interpreter imports (``PYTHONPATH``
or an install) is the one measured. It prints one JSON line: the measure, the fiber it
imported in the master and in a worker (they must be the same one, or the run measured a
mix), and its Python.

Benchmarks (each a time, so that lower is better for all):

- ``apply``: ``pool.apply(noop, (1,))`` one call after another on ``Pool(5)``, after a
  warm-up: median and p99 round trip in microseconds (an RL step, an ``AsyncManager``
  call).
- ``map``: no-op throughput, ``pool.map(noop, range(tasks), chunksize=1)`` on
  ``Pool(5)``, best of 3: microseconds a task.
- ``rounds``: rounds of 5 tasks of 1 ms sleep on ``Pool(5)`` (the ES/RL step pattern),
  median milliseconds a round.
- ``pipe``: a ``Pipe`` echo with a child ``Process``, median microseconds.
- ``queue``: a round trip through two ``Queue``s with a child ``Process`` (it gets from
  one and puts on the other), median microseconds: a ``get`` on an empty queue.
- ``drain``: ``tasks`` items queued by the master, then got one by one by a child
  ``Process``: microseconds an item, from the child's first ``get`` to its last (a
  consumer with a backlog, where a queue lends items ahead), best of 3.
- ``start``: ``Pool(workers)`` until a first ``map`` of one 200 ms sleep a worker
  returns, in milliseconds (start-up at scale: a worker holds one task of unknown or
  slow length at a time, so the map ends 200 ms after its last worker started; the
  terminate is not timed).
- ``es``: rounds of one 50 ms sleep a worker on ``Pool(workers)`` (an evolution
  strategy's iteration at scale) after a first one, median milliseconds a round (50 is
  no overhead at all).
- ``async``: rounds of one ``step`` call on each of 4 ``AsyncManager`` objects (each in
  its own job), every call sent before any result is read (an RL rollout's remote
  environments), median microseconds a round.
- ``lock``: a ``Lock``'s ``acquire`` + ``release`` by a child ``Process`` (the lock
  served by the master), median microseconds, as the child measured it.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from typing import Any, Callable, Dict, List

import fiber


def noop(x: int) -> int:
    return x


def nap(seconds: float) -> None:
    time.sleep(seconds)


def fiber_file(_: int) -> str:
    return str(fiber.__file__)


def echo_child(conn: Any) -> None:
    try:
        while True:
            conn.send(conn.recv())
    except EOFError:
        pass


def queue_echo_child(inbox: Any, outbox: Any) -> None:
    while True:
        x = inbox.get()
        outbox.put(x)
        if x is None:
            return


def drain_child(q: Any, out: Any, n: int) -> None:
    q.get()
    t = time.perf_counter()
    for _ in range(n - 1):
        q.get()
    out.put((time.perf_counter() - t) / (n - 1))


class StepEnv:
    """A remote environment whose ``step`` costs nothing: the call's own overhead."""

    def step(self, action: int) -> int:
        return action


def lock_child(lock: Any, out: Any, n: int) -> None:
    def one() -> None:
        lock.acquire()
        lock.release()

    for _ in range(200):
        one()
    out.put(_samples(one, n))


def _samples(fn: Callable[[], object], n: int) -> List[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    out.sort()
    return out


def _p99(sorted_samples: List[float]) -> float:
    return sorted_samples[int(0.99 * (len(sorted_samples) - 1))]


def _warm(pool: Any, workers: int) -> str:
    """Start every worker and its function cache; the fiber a worker imported."""
    for _ in range(3):
        pool.map(noop, range(workers * 4), chunksize=1)
    return str(pool.apply(fiber_file, (0,)))


def bench_apply(args: argparse.Namespace) -> Dict[str, Any]:
    pool = fiber.Pool(5)
    try:
        worker_fiber = _warm(pool, 5)
        for _ in range(200):
            pool.apply(noop, (1,))
        s = _samples(lambda: pool.apply(noop, (1,)), args.calls)
    finally:
        pool.terminate()
    return {"value": statistics.median(s) * 1e6, "unit": "us", "p99": _p99(s) * 1e6,
            "worker_fiber": worker_fiber}


def bench_map(args: argparse.Namespace) -> Dict[str, Any]:
    pool = fiber.Pool(5)
    try:
        worker_fiber = _warm(pool, 5)
        best = min(_samples(lambda: pool.map(noop, range(args.tasks), chunksize=1), 3))
    finally:
        pool.terminate()
    return {"value": best / args.tasks * 1e6, "unit": "us/task", "worker_fiber": worker_fiber}


def bench_rounds(args: argparse.Namespace) -> Dict[str, Any]:
    pool = fiber.Pool(5)
    try:
        worker_fiber = _warm(pool, 5)
        s = _samples(lambda: pool.map(nap, [0.001] * 5, chunksize=1), args.calls // 10)
    finally:
        pool.terminate()
    return {"value": statistics.median(s) * 1e3, "unit": "ms/round", "p99": _p99(s) * 1e3,
            "worker_fiber": worker_fiber}


def bench_pipe(args: argparse.Namespace) -> Dict[str, Any]:
    a, b = fiber.Pipe()
    child = fiber.Process(target=echo_child, args=(b,))
    child.start()
    b.close()

    def one() -> None:
        a.send(1)
        a.recv()

    try:
        for _ in range(200):
            one()
        s = _samples(one, args.calls)
    finally:
        a.close()
        child.join(10)
    return {"value": statistics.median(s) * 1e6, "unit": "us", "p99": _p99(s) * 1e6,
            "worker_fiber": str(fiber.__file__)}


def bench_queue(args: argparse.Namespace) -> Dict[str, Any]:
    inbox, outbox = fiber.Queue(), fiber.Queue()
    child = fiber.Process(target=queue_echo_child, args=(inbox, outbox))
    child.start()

    def one() -> None:
        inbox.put(1)
        outbox.get()

    try:
        for _ in range(200):
            one()
        s = _samples(one, args.calls)
    finally:
        inbox.put(None)
        outbox.get(timeout=30)
        child.join(10)
    return {"value": statistics.median(s) * 1e6, "unit": "us", "p99": _p99(s) * 1e6,
            "worker_fiber": str(fiber.__file__)}


def bench_drain(args: argparse.Namespace) -> Dict[str, Any]:
    best = float("inf")
    for _ in range(3):
        q, out = fiber.Queue(), fiber.Queue()
        for i in range(args.tasks):
            q.put(i)
        child = fiber.Process(target=drain_child, args=(q, out, args.tasks))
        child.start()
        best = min(best, out.get(timeout=300))
        child.join(30)
    return {"value": best * 1e6, "unit": "us/item", "worker_fiber": str(fiber.__file__)}


def bench_start(args: argparse.Namespace) -> Dict[str, Any]:
    t = time.perf_counter()
    pool = fiber.Pool(args.workers)
    try:
        pool.map(nap, [0.2] * args.workers, chunksize=1)
        elapsed = time.perf_counter() - t
        worker_fiber = str(pool.apply(fiber_file, (0,)))
    finally:
        pool.terminate()
    return {"value": elapsed * 1e3, "unit": "ms", "worker_fiber": worker_fiber}


def bench_es(args: argparse.Namespace) -> Dict[str, Any]:
    pool = fiber.Pool(args.workers)
    try:
        tasks = [0.05] * args.workers
        pool.map(nap, tasks, chunksize=1)
        s = _samples(lambda: pool.map(nap, tasks, chunksize=1), max(3, args.calls // 200))
        worker_fiber = str(pool.apply(fiber_file, (0,)))
    finally:
        pool.terminate()
    return {"value": statistics.median(s) * 1e3, "unit": "ms/round", "p99": s[-1] * 1e3,
            "worker_fiber": worker_fiber}


def bench_async(args: argparse.Namespace) -> Dict[str, Any]:
    import fiber.managers

    class Envs(fiber.managers.AsyncManager):
        pass

    Envs.register("StepEnv", StepEnv)
    manager = Envs()
    manager.start()
    try:
        envs = [manager.StepEnv() for _ in range(4)]

        def one() -> None:
            for h in [env.step(1) for env in envs]:
                h.get()

        for _ in range(200):
            one()
        s = _samples(one, args.calls)
    finally:
        manager.shutdown()
    return {"value": statistics.median(s) * 1e6, "unit": "us/round", "p99": _p99(s) * 1e6,
            "worker_fiber": str(fiber.__file__)}


def bench_lock(args: argparse.Namespace) -> Dict[str, Any]:
    lock, out = fiber.Lock(), fiber.Queue()
    child = fiber.Process(target=lock_child, args=(lock, out, args.calls))
    child.start()
    s = sorted(out.get(timeout=300))
    child.join(30)
    return {"value": statistics.median(s) * 1e6, "unit": "us", "p99": _p99(s) * 1e6,
            "worker_fiber": str(fiber.__file__)}


BENCHES = {"apply": bench_apply, "map": bench_map, "rounds": bench_rounds,
           "pipe": bench_pipe, "queue": bench_queue, "drain": bench_drain,
           "start": bench_start, "es": bench_es, "async": bench_async, "lock": bench_lock}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", choices=sorted(BENCHES))
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=64)
    args = parser.parse_args()
    out = BENCHES[args.bench](args)
    out.update(fiber=str(fiber.__file__), python=platform.python_version())
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
