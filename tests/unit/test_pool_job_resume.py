"""A job of several handed tasks as a whole comes back from a reset (`resume_job`) in an
order its record did not wait for: a worker connected by a hello sent again, only a worker
that never said hello kept, the same `resume_job` asked twice. Driven through the
service's handlers with no hub, as ``test_pool_job_holder.py``; each test fails on the
code before its fix (a map waiting for ever, a task run twice, a death charged twice)."""

from __future__ import annotations

from typing import Dict, List, Set, Tuple

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


class _EndingHub(Hub):
    """A hub whose ``end_peer`` ends a connection as reset, as `Server.end_peer` does
    (the service learns it through ``peer_gone``)."""

    def __init__(self, service: PoolService) -> None:
        super().__init__()
        self.service = service
        self.peers: Dict[int, Peer] = {}
        self.ended: Set[int] = set()

    def end_peer(self, peer_id: int, abort: bool = False) -> None:
        peer = self.peers.get(peer_id)
        if peer is not None and peer_id not in self.ended:
            self.ended.add(peer_id)
            peer.reset = True
            self.service.peer_gone(self, peer)  # type: ignore[arg-type]


def test_a_resume_job_asked_again_charges_a_dead_workers_task_once() -> None:
    """A job of three holds tasks 1-3; its connection is reset and a dies holding task 1,
    its end untold. `resume_job` names it: task 1 is charged to a and handed to the job
    again, and that connection is reset before the answer comes. The job asks the same
    `resume_job` on a third: a's one death is charged once (with
    ``pool_max_task_retries=1`` a second charge failed the task)."""
    service, _, job, (a, b, c) = job_service(3)
    hub = _EndingHub(service)
    service.server = hub  # type: ignore[assignment]
    service.task_seconds[1] = 0.001  # quick tasks, measured: credit to spare
    peers = [Peer(7 + k, bytes([112 + k]) * 16, False, None) for k in range(3)]
    hub.peers.update((peer.peer_id, peer) for peer in peers)
    service.from_workers(hub, peers[0], b"",  # type: ignore[arg-type]
                         pack_to([(ws.worker_id, [PoolOps.HELLO]) for ws in (a, b, c)]))
    sink = Sink()
    tasks = tasks_of(sink, [b"x"] * 3)
    service.submit(tasks)
    assert sorted(handed_to_job(hub)) == [1, 2, 3]
    peers[0].reset = True
    service.peer_gone(hub, peers[0])  # type: ignore[arg-type]
    asked = ResumeJob({b.worker_id: [2], c.worker_id: [3]}, [2, 3], {a.worker_id: [1]})
    service.resume_job(hub, peers[1], b"", asked)  # type: ignore[arg-type]
    assert tasks[0].attempts == (a,) and service.retried == 1
    assert handed_to_job(hub) == [1]  # to the job again, lost with this connection
    service.resume_job(hub, peers[2], b"", asked)  # type: ignore[arg-type]
    assert tasks[0].attempts == (a,) and service.retried == 1
    assert handed_to_job(hub) == [1]  # lost in flight: to the job once more, uncharged
    relay_results(service, hub, peers[2], [(b.worker_id, [1, 2]), (c.worker_id, [3])])
    assert sorted(sink.got) == [0, 1, 2] and service.outstanding == 0
