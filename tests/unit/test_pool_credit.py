"""How many tasks a worker holds on a slow link (``fiber.pool._credit``), driven through
the master's scheduler (``PoolService``) with a recording server, as
``test_pool_dispatch.py``; the workers' connections are real TCP sockets' records (never
connected: what the scheduler reads of one is that it is TCP, and the round trip it
measures from the traffic, here made to take 100 ms by waiting before answering).

Issue 44 (12): on a 100 ms round trip, a worker held to one task of 20 ms at a time works
a sixth of its time; it holds enough to cover its round trip, and a worker on a fast link
(or a Unix socket) still holds one slow task at a time."""

from __future__ import annotations

import math
import socket
import time
import types
from typing import Any, List, Tuple

from test_pool_dispatch import RecordingServer, Sink

from fiber.pool import _credit
from fiber.pool._protocol import WorkerHello, pack_results
from fiber.pool._service import PoolService, Task, WorkerState
from fiber.transport.framing import new_scratch
from fiber.transport.peers import Connection, Peer

FID = 1
TASK_S = 0.025


class TimingServer(RecordingServer):
    """As `RecordingServer`; the timers a lost worker's warning sets are never run."""

    def call_later(self, delay: float, fn: Any) -> Any:
        return types.SimpleNamespace(cancel=lambda: None)


def pool_of(n: int, tcp: bool = True) -> Tuple[PoolService, RecordingServer, List[Peer]]:
    service = PoolService(b"pool-test", prefetch=2, maxtasks=None, max_retries=3,
                          on_worker_gone=lambda ws, expected: None)
    server = TimingServer()
    service.server = server  # type: ignore[assignment]
    service.functions[FID] = [b"function"]
    service.cached_functions.add(FID)
    peers = []
    for worker_id in range(1, n + 1):
        named = types.SimpleNamespace(name=f"PoolWorker-{worker_id}", cancelled=False, host="",
                                      exitcode=None)
        service.add_worker(WorkerState(worker_id, process=named))  # type: ignore[arg-type]
        conn = None
        if tcp:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            conn = Connection(sock, new_scratch())
        peer = Peer(100 + worker_id, b"job", True, conn)
        service.hello(server, peer, b"", WorkerHello(worker_id))  # type: ignore[arg-type]
        peers.append(peer)
    return service, server, peers


def held(server: RecordingServer, peer: Peer, answered: List[int]) -> List[int]:
    return [t for p, t in server.tasks_sent() if p == peer.peer_id and t not in answered]


def answer(service: PoolService, server: RecordingServer, peer: Peer, task_id: int,
           after: float) -> None:
    """The worker's result for ``task_id``, arriving ``after`` seconds after its tasks
    were handed to it idle (its task ran ``TASK_S`` of them: the rest is the link's round
    trip): the hand-out's time is moved back by that much, so that the figure does not
    depend on how long a sleep takes on a loaded machine."""
    ws = service.by_peer[peer.peer_id]
    if ws.probe:
        ws.probe = time.monotonic() - after
    payload = pack_results([(task_id, True, [b"result"])], TASK_S)
    service.results(server, peer, b"", payload)  # type: ignore[arg-type]


def run_map(tcp: bool, round_trip: float, tasks: int = 40) -> Tuple[PoolService, List[int]]:
    """A map of ``tasks`` 25 ms tasks on one worker whose results take ``TASK_S +
    round_trip`` after tasks are handed to it idle; returns the service and how many
    tasks the worker held each time it answered."""
    service, server, (peer,) = pool_of(1, tcp)
    service.submit([Task(i, Sink(), 0, FID, [b"arg"], "map(f)") for i in range(tasks)])
    answered: List[int] = []
    holding = []
    while len(answered) < tasks:
        mine = held(server, peer, answered)
        holding.append(len(mine))
        answer(service, server, peer, mine[0], TASK_S + round_trip if len(mine) == 1 else 0)
        answered.append(mine[0])
    return service, holding


def test_a_worker_on_a_slow_link_holds_enough_tasks_to_cover_its_round_trip():
    service, holding = run_map(tcp=True, round_trip=0.1)
    ws = next(iter(service.workers.values()))
    assert ws.link is not None and 0.099 < ws.link.rtt < 0.11, ws.link.samples
    assert ws in service.far.workers
    # one at a time until the link was measured (its first results), then 1 + 100/25
    # (rounded up: the measured round trip is a few microseconds over 100 ms)
    assert holding[0] == 1 and max(holding) == 1 + math.ceil(ws.link.rtt / TASK_S), holding
    assert max(holding) in (5, 6), holding


def test_a_worker_on_a_fast_link_holds_one_slow_task_at_a_time():
    service, holding = run_map(tcp=True, round_trip=0.0002, tasks=8)
    ws = next(iter(service.workers.values()))
    assert ws.link is not None and ws.link.rtt < _credit.FAR_S
    assert not service.far and set(holding) == {1}, holding


def test_a_worker_on_a_unix_socket_is_never_measured():
    service, holding = run_map(tcp=False, round_trip=0.1, tasks=5)
    ws = next(iter(service.workers.values()))
    assert ws.link is None and not service.far and set(holding) == {1}, holding


def test_one_late_answer_is_not_a_slow_link():
    link = _credit.Link()
    for sample in (0.0002, 0.0003, 0.5, 0.0002):  # a pause of 0.5 s between two others
        link.observed(sample)
    assert link.rtt < _credit.FAR_S
    for sample in (0.1, 0.1):  # the link became slow: seen within three samples
        link.observed(sample)
    assert link.rtt >= 0.1


def test_the_credit_covers_the_round_trip_only_where_it_costs_a_share_of_a_task():
    assert _credit.link_credit(0.02, 2, 0.1) == 6
    assert _credit.link_credit(1.0, 2, 0.01) == 1  # 1% of a task: one at a time
    assert _credit.link_credit(None, 2, 0.1) == 1  # not measured yet
    assert _credit.link_credit(0.001, 2, 0.1) == 101  # quick tasks over a slow link
    assert _credit.link_credit(1e-5, 2, 0.1) == _credit.MAX_FAR_CREDIT
    assert _credit.link_credit(1e-4, 2, 0.0001) == _credit.credit(1e-4, 2) == 20


def test_a_lost_far_worker_leaves_the_far_set():
    service, _ = run_map(tcp=True, round_trip=0.1, tasks=3)
    ws = next(iter(service.workers.values()))
    assert ws in service.far.workers
    service.worker_lost(ws)
    assert not service.far


def test_the_kernels_round_trip_bounds_what_the_traffic_says():
    """A master or a worker slow to read (a loaded host) makes the traffic's round trip
    long, not the link's: TCP's own measure of the connection bounds it."""
    assert _credit.round_trip(0.02, 0.0001) == 0.0001  # a busy master, a fast link
    assert _credit.round_trip(0.1, 0.101) == 0.1  # a slow link, both agree
    assert _credit.round_trip(0.1, None) == 0.1  # no TCP measure: the traffic's


def test_a_real_tcp_connections_round_trip_is_read_from_the_kernel():
    from fiber.transport.sockets import tcp_rtt

    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    try:
        for _ in range(5):  # acknowledged data: the kernel's samples
            client.sendall(b"x" * 100)
            accepted.recv(100)
            accepted.sendall(b"y")
            client.recv(1)
        rtt = tcp_rtt(accepted)
        assert rtt is not None and 0 < rtt < 0.05, rtt  # loopback: microseconds
        a, b = socket.socketpair()  # a Unix socket has none
        assert tcp_rtt(a) is None
        a.close()
        b.close()
    finally:
        for s in (server, client, accepted):
            s.close()
