"""A job of several handed tasks as a whole comes back from a reset (`resume_job`) in an
order its record did not wait for: a worker connected by a hello sent again, only a worker
that never said hello kept. Driven through the service's handlers with no hub, as
``test_pool_job_holder.py``; each test fails on the code before its fix (a map waiting
for ever, a task run twice)."""

from __future__ import annotations

from typing import List, Tuple

from fiber.pool._protocol import PoolOps, ResumeJob, pack_to
from fiber.pool._service import PoolService, WorkerState
from fiber.pool._state import PoolJob
from fiber.transport.peers import Peer

from fiber_ci.pool_service import (
    Hub,
    Sink,
    handed_to_job,
    job_service,
    relay_results,
    tasks_of,
)


def _give_up_record(service: PoolService, hub: Hub) -> None:
    """The wait of the job's record ends now, before its workers' (see `_drop_holder`)."""
    holder = service.workers[10].job.holder  # type: ignore[union-attr]
    (give_up,) = [fn for _, fn in hub.timers if fn.args[0] is holder]
    give_up()


def _reset_after_one_hello(said: int) -> Tuple[PoolService, Hub, PoolJob, List[WorkerState],
                                                Sink]:
    """A job of two (a, b) of which only worker ``said`` (0: a, 1: b) said hello before
    the job was handed one task and its connection was reset."""
    service, hub, job, workers = job_service(2)
    peer = Peer(7, b"p" * 16, False, None)
    service.from_workers(hub, peer, b"",  # type: ignore[arg-type]
                         pack_to([(workers[said].worker_id, [PoolOps.HELLO])]))
    sink = Sink()
    service.submit(tasks_of(sink, [b"x"]))
    assert handed_to_job(hub) == [1]
    peer.reset = True
    service.peer_gone(hub, peer)  # type: ignore[arg-type]
    return service, hub, job, workers, sink


def test_an_heir_connected_by_a_hello_sent_again_is_answered_not_held_for_ever() -> None:
    """Only b's hello had come when the job's task was handed out and its connection
    reset; on the new connection a's hello (lost with the old one) comes first, then the
    record's wait ends, and a, connected, is its heir; b died meanwhile. `resume_job`
    keeps a, whose record must be a new one on this connection: a's result used to be
    read against the record given up, and dropped, and the map waited for ever."""
    service, hub, job, (a, b), sink = _reset_after_one_hello(1)
    again = Peer(8, b"q" * 16, False, None)
    service.from_workers(hub, again, b"",  # type: ignore[arg-type]
                         pack_to([(a.worker_id, [PoolOps.HELLO])]))
    old = job.holder
    _give_up_record(service, hub)
    assert old is not None and old.lost and set(a.pending) == {1}  # a: its heir
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [1]}, [1], {b.worker_id: []}))
    assert job.holder is not old and job.holder is a.holder and set(a.holder.pending) == {1}
    assert hub.replies[-1][0] == b"ok" and list(service.queue) == []
    relay_results(service, hub, again, [(a.worker_id, [1])])
    assert sink.got == [0] and service.outstanding == 0


def test_a_dead_heir_whose_job_keeps_only_a_worker_not_started_runs_nothing_twice() -> None:
    """a had said hello, b was still in its initializer; the record's wait ends first and
    a, its heir, dies. `resume_job` keeps b only and names task 1 as the job's: the task
    stays with the job (a new record), not handed out again once b says hello."""
    service, hub, job, (a, b), sink = _reset_after_one_hello(0)
    _give_up_record(service, hub)
    assert set(a.pending) == {1}
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({b.worker_id: [1]}, [1], {a.worker_id: []}))
    assert list(service.queue) == [] and a.lost and service.retried == 0
    service.from_workers(hub, again, b"",  # type: ignore[arg-type]
                         pack_to([(b.worker_id, [PoolOps.HELLO])]))
    assert handed_to_job(hub) == []  # the job holds it: not sent twice
    relay_results(service, hub, again, [(b.worker_id, [1])])
    assert sink.got == [0] and service.outstanding == 0
