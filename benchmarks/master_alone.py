"""The master's scheduler alone: its CPU a task for a round of one task a worker.

A pool's service (``fiber.pool._service.PoolService``) is driven through its handlers as
the hub drives it, with no process, socket or hub: ``N`` workers in jobs of ``K`` say
hello through their jobs (``from``), a round of ``N`` tasks is submitted (handed out:
one ``to`` message a job, recorded), and each job answers its workers' results in one
``from`` message (``--per-job 1``: each worker on its own connection, as a local pool's,
answering its own ``results``). Measured: the thread's CPU time (not wall time, so that a busy
machine changes the figure less) a task to hand out and to take a result in, the least
of the rounds. What it leaves out (pickling, sockets, the hub, the collector's passes
over a real master's heap) `master_scale.py` measures with stand-in workers.

It uses the service's internal API, so a version to compare must have the same
handlers: give each version's source tree (a worktree of another commit), measured in
turn, alternating, in fresh processes::

    python benchmarks/master_alone.py [--workers 10000] [--per-job 64] [--rounds 20]
                                      [--runs 3] [--src DIR ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import types
from typing import Any, List, Tuple

HERE = os.path.abspath(__file__)


class _Server:
    """Stands for the hub: keeps what the service sends."""

    def __init__(self) -> None:
        self.sent: List[Tuple[Any, List[Any]]] = []

    def send(self, peer: Any, frames: List[Any]) -> bool:
        self.sent.append((peer, frames))
        return True

    def call_later(self, *args: Any) -> None:
        return None

    def reply(self, *args: Any, **kwargs: Any) -> None:
        return None


class _Sink:
    def deliver(self, index: int, ok: bool, frames: Any) -> None:
        pass


def measure(n: int, k: int, rounds: int) -> Tuple[float, float]:
    """(hand-out, results) µs of CPU a task, the least over ``rounds``."""
    from fiber.pool._protocol import PoolOps, pack_results, pack_to, unpack_tasks, unpack_to
    from fiber.pool._service import PoolService, Task, WorkerState
    from fiber.pool._state import PoolJob
    from fiber.transport.peers import Peer
    from fiber.transport.serialization import dumps

    service = PoolService(b"bench", prefetch=2, maxtasks=None, max_retries=3,
                          on_worker_gone=lambda ws, expected: None)
    server = _Server()
    service.server = server  # type: ignore[assignment]
    service.functions[1] = [b"function"]
    service.cached_functions.add(1)
    worker_id = 0
    peers = {}  # a job a worker (``k`` 1): each worker's own connection
    of_job: dict = {}  # a job's connection -> its workers' ids
    for first in range(0, n, k) if k > 1 else ():
        process = types.SimpleNamespace(name=f"PoolJob-{first}", host="", cancelled=False)
        job = PoolJob(process, True)  # type: ignore[arg-type]
        hellos = []
        for _ in range(min(k, n - first)):
            worker_id += 1
            service.add_worker(WorkerState(worker_id, process, f"PoolWorker-{worker_id}",
                                           job))  # type: ignore[arg-type]
            hellos.append((worker_id, [PoolOps.HELLO]))
        peer = Peer(first + 1, b"job", False, None)
        of_job[peer] = [wid for wid, _ in hellos]
        service.from_workers(server, peer, b"", pack_to(hellos))  # type: ignore[arg-type]
    for worker_id in range(1, n + 1) if k == 1 else ():
        process = types.SimpleNamespace(name=f"PoolWorker-{worker_id}", host="",
                                        cancelled=False)
        service.add_worker(WorkerState(worker_id, process))  # type: ignore[arg-type]
        peers[worker_id] = Peer(worker_id, b"worker", False, None)
        # by operation, as the hub does: the same call for a version whose handler
        # reads the frames and for one given them decoded (fiber.transport.operations)
        service.handle(server, peers[worker_id], PoolOps.HELLO, b"",  # type: ignore[arg-type]
                       [worker_id.to_bytes(8, "little")])
    result = dumps(1.0)
    hand, back = [], []
    task_id = 0
    for _ in range(rounds):
        server.sent.clear()
        args = [tuple(dumps(1.0)) for _ in range(n)]
        t0 = time.thread_time()
        tasks = []
        for i in range(n):
            task_id += 1
            tasks.append(Task(task_id, _Sink(), i, 1, args[i], "map(f)"))
        service.submit(tasks)
        t1 = time.thread_time()
        answers = []
        for peer, frames in server.sent if k == 1 else ():
            ids = [t[0] for t in unpack_tasks(frames[2:])]
            answers.append((peer, pack_results([(i, True, result) for i in ids], 1.0)))
        for peer, frames in server.sent if k > 1 else ():
            messages = []
            ran: dict = {}  # worker id -> the ids of the tasks it ran
            for wid, body in unpack_to(frames[2:]):
                if bytes(body[0]) not in (PoolOps.TASKS, b"alone"):
                    continue  # (a job's credit, told to a version that hands jobs tasks)
                ids = [t[0] for t in unpack_tasks(list(body[1:]))]
                if wid == 0:  # the job's own tasks: its group spreads them, one a worker
                    workers = of_job[peer]
                    for j, i in enumerate(ids):
                        ran.setdefault(workers[j % len(workers)], []).append(i)
                else:
                    ran.setdefault(wid, []).extend(ids)
            for wid, ids in ran.items():
                messages.append((wid, [PoolOps.RESULTS, *pack_results(
                    [(i, True, result) for i in ids], 1.0)]))
            answers.append((peer, pack_to(messages)))
        t2 = time.thread_time()
        handler = service.results if k == 1 else service.from_workers
        for peer, payload in answers:
            handler(server, peer, b"", payload)  # type: ignore[arg-type]
        t3 = time.thread_time()
        if service.outstanding:
            raise AssertionError(f"{service.outstanding} tasks without their result")
        hand.append((t1 - t0) / n * 1e6)
        back.append((t3 - t2) / n * 1e6)
    return min(hand), min(back)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=10000)
    parser.add_argument("--per-job", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="fresh processes a version")
    parser.add_argument("--src", action="append", default=[],
                        help="a source tree (with src/fiber) to measure; default: this one")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(*measure(args.workers, args.per_job, args.rounds))
        return
    trees = args.src or [os.path.dirname(os.path.dirname(HERE))]
    figures: dict = {tree: [] for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
            out = subprocess.run(
                [sys.executable, HERE, "--child", "--workers", str(args.workers),
                 "--per-job", str(args.per_job), "--rounds", str(args.rounds)],
                env=env, capture_output=True, text=True, check=True).stdout.split()
            figures[tree].append((float(out[0]), float(out[1])))
    print(f"The master's scheduler alone (no sockets): {args.workers} workers in jobs of "
          f"{args.per_job}, CPU µs a task, the least of {args.rounds} rounds, "
          f"the median of {args.runs} processes")
    base = None
    for tree, runs in figures.items():
        hand = sorted(r[0] for r in runs)[len(runs) // 2]
        back = sorted(r[1] for r in runs)[len(runs) // 2]
        ratio = "" if base is None else f"  ({(hand + back) / base:.2f}x the first)"
        base = base if base is not None else hand + back
        print(f"  {tree}: hand-out {hand:.2f}, results {back:.2f}, total "
              f"{hand + back:.2f}{ratio}")


if __name__ == "__main__":
    main()
