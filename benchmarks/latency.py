"""Round-trip latency of a pool's ``apply``, an executor's ``submit().result()`` and a
``Pipe`` echo, against multiprocessing and concurrent.futures.

    .venv/bin/python benchmarks/latency.py [--calls N] [--only apply|submit|pipe|wait]
        [--fiber-only]

``apply``: ``pool.apply(noop, (1,))`` on a pool of 5 workers. ``submit``:
``executor.submit(noop, 1).result()`` on ``fiber.futures.Executor(5)`` and
``concurrent.futures.ProcessPoolExecutor(5)``. ``pipe``: the parent sends an object
through a ``Pipe`` to a child that sends it back. ``wait``: the same with 4 children in
turn, the parent finding the ready one with ``connection.wait``. Median and p99 in microseconds.
``--fiber-only`` skips the standard library (for profiling one side).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import multiprocessing.connection
from typing import Any, Dict, List

from _common import latencies, table

import fiber
import fiber.connection
import fiber.futures

WORKERS = 5


def noop(x: int) -> int:
    return x


def echo_child(conn: Any) -> None:
    try:
        while True:
            conn.send(conn.recv())
    except EOFError:
        pass


def apply_rtt(module: Any, calls: int) -> Dict[str, float]:
    ctx = module.get_context("spawn") if module is multiprocessing else module
    pool = ctx.Pool(WORKERS)
    try:
        for _ in range(3):
            pool.map(noop, range(WORKERS * 4), chunksize=1)
        return latencies(lambda: pool.apply(noop, (1,)), calls)
    finally:
        pool.terminate()


def submit_rtt(module: Any, calls: int) -> Dict[str, float]:
    if module is multiprocessing:
        executor: Any = concurrent.futures.ProcessPoolExecutor(
            WORKERS, mp_context=multiprocessing.get_context("spawn"))
    else:
        executor = fiber.futures.Executor(WORKERS)
    with executor:
        for _ in range(WORKERS * 4):
            executor.submit(noop, 1).result()
        return latencies(lambda: executor.submit(noop, 1).result(), calls)


def pipe_rtt(module: Any, calls: int) -> Dict[str, float]:
    ctx = module.get_context("spawn") if module is multiprocessing else module
    a, b = ctx.Pipe()
    child = ctx.Process(target=echo_child, args=(b,))
    child.start()
    b.close()
    try:
        for _ in range(20):
            a.send(1)
            a.recv()

        def one() -> None:
            a.send(1)
            a.recv()

        return latencies(one, calls)
    finally:
        a.close()
        child.join(10)


def wait_rtt(module: Any, calls: int) -> Dict[str, float]:
    """The fan-in of a vectorized environment: send to one of 4 echo children in turn,
    ``connection.wait`` on all 4 ends, receive from the one that is ready."""
    ctx = module.get_context("spawn") if module is multiprocessing else module
    pairs = [ctx.Pipe() for _ in range(4)]
    children = [ctx.Process(target=echo_child, args=(b,)) for _, b in pairs]
    for child in children:
        child.start()
    ends = [a for a, _ in pairs]
    for _, b in pairs:
        b.close()
    turn = iter(range(1 << 62))
    try:
        for a in ends:
            a.send(1)
            a.recv()

        def one() -> None:
            ends[next(turn) % 4].send(1)
            for ready in module.connection.wait(ends):
                ready.recv()

        return latencies(one, calls)
    finally:
        for a in ends:
            a.close()
        for child in children:
            child.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--only", choices=["apply", "submit", "pipe", "wait"])
    parser.add_argument("--fiber-only", action="store_true")
    args = parser.parse_args()
    kinds = [args.only] if args.only else ["apply", "submit", "pipe", "wait"]
    modules: List[Any] = [fiber] if args.fiber_only else [multiprocessing, fiber]
    for kind in kinds:
        fn = {"apply": apply_rtt, "submit": submit_rtt, "pipe": pipe_rtt, "wait": wait_rtt}[kind]
        results = [fn(m, args.calls) for m in modules]
        if len(results) == 1:
            table(f"{kind} round trip over {args.calls} calls (microseconds)",
                  ["", "fiber"], [(k, results[0][k] * 1e6) for k in ("median", "p99")])
        else:
            lm, lf = results
            table(f"{kind} round trip over {args.calls} calls (microseconds; the reference "
                  "is multiprocessing, ProcessPoolExecutor for submit)",
                  ["", "multiprocessing", "fiber", "fiber/mp"],
                  [(k, lm[k] * 1e6, lf[k] * 1e6, lf[k] / lm[k]) for k in ("median", "p99")])


if __name__ == "__main__":
    main()
