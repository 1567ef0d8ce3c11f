"""Which worker a pool's master hands a task to (``fiber.pool._service.PoolService``),
driven through its handlers with a recording server in place of the hub: no process.

One task at a time goes back to the worker that returned the previous one (still polling
for its next task), and the tasks of a map spread over the idle workers before any
worker holds two."""

from __future__ import annotations

import gc
import types
from typing import Any, Dict, List, Tuple

from fiber.pool._protocol import (
    FUNCTION_SLOTS,
    PoolOps,
    WorkerHello,
    pack_results,
    remember,
    unpack_tasks,
)
from fiber.pool._service import PoolService, Task, WorkerState
from fiber.transport.peers import Peer

FID = 1


class RecordingServer:
    """Stands for the hub: keeps what the service sends, to whom."""

    def __init__(self) -> None:
        self.sent: List[Tuple[Peer, List[Any]]] = []

    def send(self, peer: Peer, frames: List[Any]) -> bool:
        self.sent.append((peer, frames))
        return True

    def tasks_sent(self) -> List[Tuple[int, int]]:
        """``(worker's peer id, task id)`` of every task sent so far, in order."""
        out = []
        for peer, frames in self.sent:
            if frames[1] == PoolOps.TASKS:
                out.extend((peer.peer_id, t[0]) for t in unpack_tasks(frames[2:]))
        return out


class Sink:
    def deliver(self, index: int, ok: bool, frames: List[Any]) -> None:
        pass


def pool_of(n: int) -> Tuple[PoolService, RecordingServer, List[Peer]]:
    """A service whose ``n`` workers have all connected (said hello), in order."""
    service = PoolService(b"pool-test", prefetch=2, maxtasks=None, max_retries=3,
                          on_worker_gone=lambda ws, expected: None)
    server = RecordingServer()
    service.server = server  # type: ignore[assignment]
    service.functions[FID] = [b"function"]
    service.cached_functions.add(FID)  # kept between calls, as the pool's submitters do
    peers = []
    for worker_id in range(1, n + 1):
        # what the scheduler reads of a worker's Process: its name (the task stream)
        named = types.SimpleNamespace(name=f"PoolWorker-{worker_id}")
        service.add_worker(WorkerState(worker_id, process=named))  # type: ignore[arg-type]
        peer = Peer(100 + worker_id, b"job", True, None)
        service.hello(server, peer, b"", WorkerHello(worker_id))  # type: ignore[arg-type]
        peers.append(peer)
    return service, server, peers


def submit(service: PoolService, task_ids: range) -> None:
    service.submit([Task(i, Sink(), 0, FID, [b"arg"], "apply(f)") for i in task_ids])


def return_results(service: PoolService, server: RecordingServer, peer: Peer,
                   task_ids: List[int]) -> None:
    payload = pack_results([(i, True, [b"result"]) for i in task_ids], 1e-5)
    service.results(server, peer, b"", payload)  # type: ignore[arg-type]


def test_one_task_at_a_time_goes_back_to_the_worker_that_returned_the_last():
    service, server, peers = pool_of(5)
    by_id = {p.peer_id: p for p in peers}
    for task_id in range(1, 41):
        submit(service, range(task_id, task_id + 1))
        peer_id, sent = server.tasks_sent()[-1]
        assert sent == task_id
        return_results(service, server, by_id[peer_id], [task_id])
    workers = {peer_id for peer_id, _ in server.tasks_sent()}
    assert len(workers) == 1, workers


def test_a_map_reaches_every_idle_worker_before_any_holds_two():
    service, server, peers = pool_of(4)
    service.task_seconds[FID] = 1e-4  # quick tasks: a worker may hold several
    submit(service, range(1, 5))
    assert sorted(p for p, _ in server.tasks_sent()) == sorted(p.peer_id for p in peers)
    submit(service, range(5, 13))
    held = {p.peer_id: 0 for p in peers}
    for peer_id, _ in server.tasks_sent():
        held[peer_id] += 1
    assert sorted(held.values()) == [3, 3, 3, 3]


def test_the_next_task_goes_to_the_least_loaded_worker_not_the_last_one_heard():
    service, server, peers = pool_of(2)
    service.task_seconds[FID] = 1e-4
    submit(service, range(1, 5))  # two each
    first = server.tasks_sent()[0][0]
    by_id = {p.peer_id: p for p in peers}
    mine = [t for p, t in server.tasks_sent() if p == first]
    return_results(service, server, by_id[first], mine[:1])  # it holds 1, the other 2
    submit(service, range(5, 6))
    assert server.tasks_sent()[-1][0] == first


def test_a_function_lru_keeps_the_newest_as_the_worker_does_and_is_not_tracked() -> None:
    """The master's LRU of the functions a worker keeps must evict what the worker's
    own evicts (else a task names a function the worker no longer has), and, a dict of
    ints, stays out of the garbage collector's passes (10,000 of them at 10,000
    workers)."""
    lru: Dict[int, None] = {}
    for fid in range(FUNCTION_SLOTS):
        remember(lru, fid, None)
    remember(lru, 0, None)  # used again: now the newest
    remember(lru, FUNCTION_SLOTS, None)  # one more: the oldest (1) goes, not 0
    assert list(lru) == [*range(2, FUNCTION_SLOTS), 0, FUNCTION_SLOTS]
    assert not gc.is_tracked(lru)

    service, server, peers = pool_of(1)
    ws = next(iter(service.workers.values()))
    for fid in range(2, FUNCTION_SLOTS + 8):  # more functions than a worker keeps
        service.functions[fid] = [b"function %d" % fid]
        task = Task(fid, Sink(), 0, fid, (b"arg",), "f")  # type: ignore[arg-type]
        service.submit([task])
        return_results(service, server, peers[0], [task.task_id])
    assert list(ws.functions) == list(range(8, FUNCTION_SLOTS + 8))
    assert not gc.is_tracked(ws.functions) and not gc.is_tracked(ws.given)
