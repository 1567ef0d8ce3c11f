"""Tasks a pool must neither strand nor charge wrongly while its workers stop: after
``close()`` (the idle workers told to exit), at ``terminate()`` while a job of several
waits to connect again, and with ``maxtasksperchild`` after a reset. Driven through the
master's handlers with a recording server, as ``test_pool_late.py``; each test fails on
the code before its fix."""

from __future__ import annotations

import types

from test_pool_late import FID, CountingSink, TimedServer, answer, bare_service, pool_of

from fiber.pool._protocol import PoolOps, Resume, WorkerHello, pack_to
from fiber.pool._service import Task, WorkerState
from fiber.transport.peers import Peer

from fiber_ci.pool_service import Sink, handed_to_job, job_service, tasks_of


def _stops(server: TimedServer, ws: WorkerState) -> bool:
    """Whether ``ws`` was told to exit."""
    return any(p is ws.peer and frames[1] == PoolOps.STOP for p, frames in server.sent)


def test_after_close_a_task_requeued_goes_to_no_worker_told_to_exit() -> None:
    """close() tells the idle worker B to exit; A is then lost holding task 1, which
    went to B, exiting, and was lost with it, charged twice: with
    pool_max_task_retries=1 it failed with WorkerLostError. It waits for a new worker."""
    service, server, _ = pool_of(["node1", "node2"])
    service.max_retries = 1
    service.submit([Task(1, CountingSink(), 0, FID, [b"arg"], "apply(f)")])
    a = next(w for w in service.workers.values() if w.pending)
    b = next(w for w in service.workers.values() if w is not a)
    service.closing = True
    service.stop_idle_workers()
    assert _stops(server, b) and not _stops(server, a)
    a.exitcode, a.process.exit_reason = -9, ""
    service.worker_lost(a)  # preempted
    assert not b.pending and [t.task_id for t in service.queue] == [1]


def test_after_close_a_late_task_is_not_copied_to_workers_told_to_exit() -> None:
    """close() while one task runs late: each of the late checks copied it to an idle
    worker told to exit, which ended holding it and was charged; after
    pool_max_task_retries + 1 of them the task failed while its worker still ran it."""
    service, server, _ = pool_of(["node1", "node2", "node3", "node4", "node5"])
    service.task_seconds[FID] = 0.02
    sink = CountingSink()
    task = Task(1, sink, 0, FID, [b"arg"], "apply(f)")
    service.submit([task])
    a = next(w for w in service.workers.values() if w.pending)
    service.closing = True
    service.stop_idle_workers()
    a.since -= 10  # late
    for _ in range(5):
        server.fire()
    assert service.copies == 0 and task.held_by == 1 and task.attempts == ()
    assert a.peer is not None
    answer(service, server, a.peer, [1])
    assert sink.delivered == [(0, True)]


def test_terminate_fails_the_tasks_of_a_job_waiting_to_connect_again() -> None:
    """A job of several handed tasks as a whole is reset: its record, waiting for
    `resume_job`, is in no peer's table; terminate() (`fail_all`) skipped it and the
    map's results never came."""
    service, hub, job, states = job_service(2)
    peer = Peer(7, b"p" * 16, False, None)
    service.from_workers(hub, peer, b"",  # type: ignore[arg-type]
                         pack_to([(ws.worker_id, [PoolOps.HELLO]) for ws in states]))
    sink = Sink()
    service.submit(tasks_of(sink, [b"x", b"y"]))
    assert handed_to_job(hub) == [1, 2]
    peer.reset = True
    service.peer_gone(hub, peer)  # type: ignore[arg-type]
    assert job.holder is not None and job.holder.resume_by
    service.closing = True
    service.fail_all(RuntimeError("the pool was terminated"))
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0


def test_maxtasksperchild_counts_no_task_lost_in_flight_in_a_reset() -> None:
    """maxtasksperchild=2: a worker handed 2 tasks comes back from a reset holding the
    first only (the second lost in flight). The master counted 2 and handed it no more,
    while the worker, having run 1, waited for a second: neither took a task nor
    exited, and the map waited for ever."""
    service, server = bare_service(maxtasks=2)
    service.task_seconds[FID] = 0.001  # quick: a credit of several
    process = types.SimpleNamespace(name="PoolWorker-1", host="node1", cancelled=False,
                                    exitcode=None, job_id="")
    ws = WorkerState(1, process=process)  # type: ignore[arg-type]
    service.add_worker(ws)
    peer = Peer(101, b"job", True, None)
    service.hello(server, peer, b"", WorkerHello(1))  # type: ignore[arg-type]
    sink = CountingSink()
    service.submit([Task(i, sink, i, FID, [b"arg"], "map(f)") for i in (1, 2, 3)])
    assert list(ws.pending) == [1, 2] and ws.assigned == 2
    peer.reset = True
    service.peer_gone(server, peer)  # type: ignore[arg-type]
    again = Peer(102, b"job", True, None)
    service.resume(server, again, b"", Resume(1, [1]))  # type: ignore[arg-type]
    assert list(ws.pending) == [1, 2] and ws.assigned == 2  # the 2nd handed again
    answer(service, server, again, [1, 2])
    assert sink.delivered == [(1, True), (2, True)] and [t.task_id for t in service.queue] == [3]
