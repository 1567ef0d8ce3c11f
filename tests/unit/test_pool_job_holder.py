"""A job of several handed tasks as a whole (``fiber.pool._jobs``, issue 45), driven through
the service's handlers with no hub: what the job is sent, how its results are told per
worker, and that a task comes back exactly once when a worker in it ends, when the job is
lost and when its connection is reset. The group's side: ``fiber.pool._jobqueue``."""

from __future__ import annotations

import logging
from typing import Any, Dict, List, NamedTuple, Tuple

import pytest

from fiber.pool import _losses
from fiber.pool._jobqueue import JobQueue, depth_of
from fiber.pool._poolcore import RUN, PoolCore
from fiber.pool._protocol import (
    JOB_ID,
    Kept,
    PoolOps,
    ResumeJob,
    WorkerEnded,
    pack_results,
    pack_tasks,
    pack_to,
    unpack_tasks,
    unpack_to,
)
from fiber.pool._service import PoolService, Task, WorkerState
from fiber.pool._state import PoolJob
from fiber.transport.peers import Peer

from fiber_ci.pool_service import (
    Hub,
    JobProcess,
    Sink,
    handed_to_job,
    job_service,
    relay_results,
    tasks_of,
)


@pytest.fixture
def said(caplog: Any) -> Any:
    caplog.set_level(logging.WARNING, logger="fiber")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "fiber"]


def _job(workers: int = 2) -> Tuple[PoolService, Hub, Peer, PoolJob, List[WorkerState]]:
    service, hub, job, states = job_service(workers)
    peer = Peer(7, b"p" * 16, False, None)
    service.from_workers(hub, peer, b"",  # type: ignore[arg-type]
                         pack_to([(ws.worker_id, [PoolOps.HELLO]) for ws in states]))
    return service, hub, peer, job, states


def _submit(service: PoolService, sink: Sink, count: int) -> List[Task]:
    tasks = tasks_of(sink, [b"x"] * count)
    service.submit(tasks)
    return tasks


class _Handed(NamedTuple):
    """A job of two workers (`_job`) handed two tasks as a whole, its ``holder``'s."""

    service: PoolService
    hub: Hub
    peer: Peer
    job: PoolJob
    holder: WorkerState
    workers: List[WorkerState]
    sink: Sink
    tasks: List[Task]


@pytest.fixture
def handed() -> _Handed:
    service, hub, peer, job, workers = _job()
    assert job.holder is not None
    sink = Sink()
    tasks = _submit(service, sink, 2)
    assert handed_to_job(hub) == [t.task_id for t in tasks]
    return _Handed(service, hub, peer, job, job.holder, workers, sink, tasks)


def test_a_job_is_handed_tasks_as_a_whole_and_says_which_worker_ran_each() -> None:
    service, hub, peer, job, (a, b) = _job()
    holder = job.holder
    assert holder is not None and holder.width == 2 and a.holder is holder
    sink = Sink()
    _submit(service, sink, 5)
    assert handed_to_job(hub) == [1, 2]  # two workers, a credit of one each (not measured)
    assert list(holder.pending) == [1, 2] and not a.pending and not b.pending
    relay_results(service, hub, peer, [(a.worker_id, [1]), (b.worker_id, [2])])
    assert sink.got == [0, 1] and a.done == 1 and b.done == 1
    assert handed_to_job(hub) == [3, 4, 5]  # quick tasks, measured: more credit
    relay_results(service, hub, peer, [(b.worker_id, [3, 4])])
    relay_results(service, hub, peer, [(a.worker_id, [5])])
    assert sorted(sink.got) == [0, 1, 2, 3, 4] and b.done == 3 and not holder.pending
    assert service.outstanding == 0


def test_a_worker_that_ends_gives_back_what_it_held_and_the_job_keeps_its_queue(
        said, handed) -> None:
    service, hub, peer, _, holder, (a, _), sink, tasks = handed
    holder.pending[99] = queued = Task(99, sink, 9, 1, [b"x"], "map(f)")  # queued in the job
    queued.held_by = 1
    service.outstanding += 1
    service.worker_ended(hub, peer, b"r", WorkerEnded(a.worker_id, -9, (tasks[0].task_id,)))
    # back to the queue, charged to it; the job, one worker left, is full meanwhile
    assert a.lost and list(service.queue) == [tasks[0]] and tasks[0].attempts == (a,)
    assert set(holder.pending) == {tasks[1].task_id, 99}  # still the job's
    assert holder.width == 1
    (line,) = said()
    assert "PoolWorker-10" in line and "map(f) task 0" in line, line


def test_a_job_lost_gives_back_all_it_holds_once_named_in_one_warning(said, handed) -> None:
    service, hub, peer, job, _, (a, b), _, tasks = handed
    service.peer_gone(hub, peer)  # closed: not a reset
    job.process.exitcode = -9
    service.job_ended(job, -9)
    assert a.lost and b.lost and job.holder is not None and job.holder.lost
    assert sorted(t.task_id for t in service.queue) == [t.task_id for t in tasks]
    (line,) = said()
    assert "was lost with 2 workers" in line and "map(f) tasks 0, 1" in line, line


def test_a_job_lost_whose_end_comes_after_the_wait_is_said_in_one_warning(said, handed) -> None:
    """A job's connection timed out (a cut host): its workers are lost, and their warning
    waits for the job's end (``REPORT_WAIT_S``). A job on a host cut off may end only
    once the cut heals, past that wait (netns, a 60 s cut: 0.3 s short of it): the wait's
    end says the job's one warning, both workers and their tasks, as its end would
    have; each worker's own said apart was the flake of
    ``test_a_cut_past_the_grace_loses_the_host_once_and_says_so[2]``."""
    service, hub, peer, job, _, (a, b), _, tasks = handed
    service.peer_gone(hub, peer)  # timed out: not a reset
    assert a.lost and b.lost and not said()
    waits = [fn for delay, fn in hub.timers if delay == _losses.REPORT_WAIT_S]
    assert len(waits) == 2, hub.timers  # one a worker
    for fn in waits:  # the job has not ended meanwhile
        fn()
    (line,) = said()
    assert "PoolJob-1" in line and "was lost with 2 workers" in line, line
    assert "contact lost (its end not reported yet)" in line and "map(f) tasks 0, 1" in line
    service.job_ended(job, 0)  # its end, once the cut heals: said already
    assert len(said()) == 1, said()


def test_a_reset_job_names_what_it_holds_and_the_rest_runs_again(handed) -> None:
    service, hub, peer, _, holder, (a, b), sink, tasks = handed
    peer.reset = True
    service.peer_gone(hub, peer)
    assert holder.resume_by and not holder.lost and len(holder.pending) == 2
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [], b.worker_id: []}, [tasks[0].task_id]))
    assert holder.connected and holder.peer is again
    assert tasks[0].task_id in holder.pending
    assert handed_to_job(hub) == [tasks[1].task_id]  # lost in flight: handed out again
    relay_results(service, hub, again, [(b.worker_id, [1, 2])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0


def test_the_jobs_queue_hands_each_worker_up_to_its_depth_and_suspects_alone() -> None:
    queue = JobQueue()
    queue.received([PoolOps.CREDIT, b"8"])
    assert queue.depth == depth_of(8) == 4
    queue.received([PoolOps.TASKS, *pack_tasks(
        [(i, 1, [b"f"] if i == 1 else None, [b"x"]) for i in range(1, 11)])])
    queue.received([PoolOps.ALONE, *pack_tasks([(11, 1, None, [b"x"])])])
    held = {1: {}, 2: {}}  # type: ignore[var-type]
    given = {wid: frames for wid, frames, _ in queue.spread(held)}  # type: ignore[arg-type]
    assert sorted(len(h) for h in held.values()) == [4, 4] and len(queue.queue) == 3
    first = unpack_tasks(given[1][1:])
    assert first[0][2] == [b"f"] and all(t[2] is None for t in first[1:])
    held[1].clear()  # its four answered
    queue.spread(held)  # type: ignore[arg-type]
    assert len(held[1]) == 2 and [t[0] for t in queue.queue] == [11]  # waits: none idle
    held[2].clear()
    queue.spread(held)  # type: ignore[arg-type]
    assert 11 in held[2] and len(held[2]) == 1 and queue.alone == {11}
    queue.spread(held)  # type: ignore[arg-type]
    assert len(held[2]) == 1  # nothing beside it


def test_tasks_a_dead_worker_was_handed_go_back_to_the_head_of_its_jobs_queue() -> None:
    """`JobQueue.take_back`: what `spread` handed a worker whose send failed (it died,
    not reaped yet) is queued again first, in order, out of its held tasks; a suspect
    among them runs alone again on the next worker holding nothing."""
    queue = JobQueue()
    queue.received([PoolOps.CREDIT, b"2"])
    queue.received([PoolOps.ALONE, *pack_tasks([(1, 1, [b"f"], [b"x"])])])
    queue.received([PoolOps.TASKS, *pack_tasks([(i, 1, None, [b"x"]) for i in (2, 3, 4)])])
    held: Dict[int, Dict[int, None]] = {7: {}, 8: {}}
    given = {wid: tasks for wid, _, tasks in queue.spread(held)}
    assert held == {7: {1: None}, 8: {2: None, 3: None}} and queue.alone == {1}
    queue.take_back(7, given[7], held[7])  # 7 had died: the send failed
    assert held[7] == {} and queue.alone == set() and queue.ids() == [1, 4]
    del held[7]  # (reaped)
    held[8].clear()  # its two answered
    queue.spread(held)
    assert held[8] == {1: None} and queue.alone == {1} and queue.ids() == [4]


def test_a_worker_whose_end_its_job_tells_after_a_reset_is_retried_once(said) -> None:
    """The order a reset makes: the job's connection is reset (its workers and its
    record waited for), a worker dies meanwhile and its job cannot say so; the job
    comes back without it (``resume_job``: the master loses it, holding nothing of its
    own, the job's record keeps its task), then says how it ended, naming the task
    (``resume_job`` names it as ended, holding that task), then says how it ended
    (``worker_ended``, holding none). That task is counted in ``retried`` once, charged
    once, named in the worker's warning, and its result delivered once."""
    service, hub, peer, job, (a, b) = _job()
    holder = job.holder
    assert holder is not None
    sink = Sink()
    tasks = _submit(service, sink, 2)
    assert handed_to_job(hub) == [1, 2]  # a runs task 1, b task 2 (the job's choice)
    peer.reset = True
    service.peer_gone(hub, peer)
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({b.worker_id: [2]}, [2], {a.worker_id: [1]}))
    assert a.lost and not a.pending and set(holder.pending) == {2} and not said()
    assert tasks[0].attempts == (a,) and service.retried == 1
    assert list(service.queue) == [tasks[0]]  # (back at once: it is known to be lost)
    service.worker_ended(hub, again, b"r", WorkerEnded(a.worker_id, -9))
    (line,) = said()
    assert "PoolWorker-10" in line and "resubmitted map(f) task 0" in line, line
    relay_results(service, hub, again, [(b.worker_id, [2])])
    assert handed_to_job(hub) == [1]
    relay_results(service, hub, again, [(b.worker_id, [1])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0
    assert service.retried == 1 and tasks[0].attempts == (a,)


def test_a_job_lost_before_it_tells_a_workers_end_charges_that_workers_task(said) -> None:
    """As above, but the job never tells the end it named in ``resume_job``: its other
    worker ends too, then the job itself. The task of the worker whose end was never
    told was charged to it when the job named it (the retry limit counts it), not
    "never handed out"; both are counted in ``retried`` and named in the job's one
    warning."""
    service, hub, peer, job, (a, b) = _job()
    holder = job.holder
    assert holder is not None
    sink = Sink()
    tasks = _submit(service, sink, 2)
    handed_to_job(hub)
    peer.reset = True
    service.peer_gone(hub, peer)
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({b.worker_id: [2]}, [2], {a.worker_id: [1]}))
    assert service.retried == 1 and tasks[0].attempts == (a,)
    service.worker_ended(hub, again, b"r", WorkerEnded(b.worker_id, -9, (2,)))
    assert service.retried == 2 and tasks[1].attempts == (b,)
    service.peer_gone(hub, again)  # closed: the job ended
    job.process.exitcode = -9
    service.job_ended(job, -9)
    assert tasks[0].attempts == (a,) and service.retried == 2
    assert sorted(t.task_id for t in service.queue) == [1, 2]
    (line,) = said()  # (b's waited behind a's, said first: both in the job's)
    assert "was lost with 2 workers" in line and "resubmitted map(f) tasks 0, 1" in line, line


def test_a_workers_end_told_twice_as_its_answer_was_lost_leaves_no_task_behind(handed) -> None:
    """The master was told a worker's end and took its task back, but the answer was
    lost to a reset; the task, handed to the same job again, was lost in flight too. The
    job comes back naming the worker as ended (holding that task: it cannot know it went
    back) and the task apart from what it holds, then tells the end again: the task is
    handed out again, not held for the job forever, and its result comes once."""
    service, hub, peer, _, holder, (a, b), sink, tasks = handed
    service.worker_ended(hub, peer, b"r", WorkerEnded(a.worker_id, -9, (1,)))  # told...
    assert hub.replies and a.lost and list(service.queue) == [tasks[0]]
    relay_results(service, hub, peer, [(b.worker_id, [2])])
    assert handed_to_job(hub) == [1] and set(holder.pending) == {1}  # ...handed out again
    peer.reset = True  # ...the answer and the task lost in flight
    service.peer_gone(hub, peer)
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({b.worker_id: []}, [], {a.worker_id: [1]}))
    service.worker_ended(hub, again, b"r", WorkerEnded(a.worker_id, -9))
    assert handed_to_job(hub) == [1]  # not held for the job: out again
    relay_results(service, hub, again, [(b.worker_id, [1])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0 and not holder.pending


def test_a_result_sent_after_its_worker_was_lost_answers_what_the_job_holds(handed) -> None:
    """A worker answers its task and ends while its job's connection is reset: the job
    reaps it, and cannot send that result yet. It comes back naming the task under
    ``JOB_ID`` (answered: not the worker's to lose), the worker as ended holding none,
    then tells the end and sends the result. The worker is lost by then; the result
    still answers the task the job's record holds, once, and nothing runs again."""
    service, hub, peer, _, holder, (a, b), sink, tasks = handed
    peer.reset = True
    service.peer_gone(hub, peer)
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({b.worker_id: [2]}, [1, 2], {a.worker_id: []}))
    assert set(holder.pending) == {1, 2} and not service.queue
    service.worker_ended(hub, again, b"r", WorkerEnded(a.worker_id, 0))
    relay_results(service, hub, again, [(a.worker_id, [1]), (b.worker_id, [2])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0 and not holder.pending
    assert service.retried == 0 and not service.queue and handed_to_job(hub) == []
    relay_results(service, hub, again, [(a.worker_id, [1])])  # (a second copy: dropped)
    assert sorted(sink.got) == [0, 1]


def test_a_worker_the_job_names_and_the_master_did_not_keep_leaves_no_task_behind(handed) -> None:
    """A job comes back from a reset naming a worker the master gave up meanwhile (here:
    one it retired), holding a task: the job stops that worker, which says nothing more
    of it, so the task goes back to the queue and out again, not held for the job
    forever; its result comes once."""
    service, hub, peer, _, holder, (a, b), sink, tasks = handed
    peer.reset = True
    service.peer_gone(hub, peer)
    service.worker_lost(a)  # given up while the job was away
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [1], b.worker_id: [2]}, [1, 2]))
    status, payload = hub.replies[-1]
    assert status == b"ok" and Kept.decode(payload).worker_ids == [b.worker_id]
    assert set(holder.pending) == {2} and [t.task_id for t in service.queue] == [1]
    relay_results(service, hub, again, [(b.worker_id, [2])])
    assert handed_to_job(hub) == [1]
    relay_results(service, hub, again, [(b.worker_id, [1])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0 and not holder.pending
    assert [t.task_id for t in tasks] == [1, 2]


def _given_up_first() -> _Handed:
    """A job of two handed two tasks (`handed`), its connection reset, and its record's
    wait ended before its workers': worker 10, its heir, holds both tasks."""
    service, hub, peer, job, workers = _job()
    holder = job.holder
    assert holder is not None
    sink = Sink()
    tasks = _submit(service, sink, 2)
    assert handed_to_job(hub) == [1, 2]
    peer.reset = True
    service.peer_gone(hub, peer)
    (give_up,) = [fn for _, fn in hub.timers if fn.args[0] is holder]
    give_up()
    assert holder.lost and set(workers[0].pending) == {1, 2}
    return _Handed(service, hub, peer, job, holder, workers, sink, tasks)


def test_a_job_whose_record_was_given_up_before_its_workers_answers_through_a_new_one(
        ) -> None:
    """After a reset the job's record stops waiting before its workers do: what it held
    goes to a worker, waited for still. The job comes back with both workers: a new
    record holds what they hold, and their results answer it; nothing is held for ever."""
    service, hub, peer, _, holder, (a, b), sink, tasks = _given_up_first()
    assert not a.lost
    again = Peer(8, b"q" * 16, False, None)
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [1], b.worker_id: [2]}, [1, 2]))
    new = a.holder
    assert new is not holder and b.holder is new and not a.pending
    # a holds what the record held (1 and 2); the job holds 2 in b: not lost, and not
    # run again (its result, from b, answers it in the new record)
    assert set(new.pending) == {1, 2} and handed_to_job(hub) == []
    relay_results(service, hub, again, [(a.worker_id, [1])])
    relay_results(service, hub, again, [(b.worker_id, [2])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0 and not new.pending
    assert service.retried == 0


def test_an_untold_end_after_the_record_was_given_up_is_charged_to_its_worker(said) -> None:
    """After a reset the job's record is given up first (its tasks to a worker, its
    heir); a worker dies meanwhile holding a task, and the job comes back naming it as
    ended: that task is charged to the dead worker (counted, named in its warning,
    under the retry limit), taken from the heir, not run again as lost in flight."""
    service, hub, peer, _, holder, (a, b), sink, tasks = _given_up_first()
    service.resume_job(hub, Peer(8, b"q" * 16, False, None), b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [1]}, [1], {b.worker_id: [2]}))
    assert tasks[1].attempts == (b,) and service.retried == 1
    assert 2 not in a.pending and set(a.holder.pending) == {1}
    again = a.holder.peer
    service.worker_ended(hub, again, b"r", WorkerEnded(b.worker_id, -9))
    (line,) = said()
    assert "PoolWorker-11" in line and "resubmitted map(f) task 1" in line, line
    relay_results(service, hub, again, [(a.worker_id, [1])])
    assert handed_to_job(hub) == [2]  # (queued while a held task 1: its one credit)
    relay_results(service, hub, again, [(a.worker_id, [2])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0
    assert tasks[1].attempts == (b,) and service.retried == 1


def test_a_dead_heir_is_charged_its_own_task_and_the_job_keeps_the_rest(said) -> None:
    """As above, but the worker that dies is the heir (it holds both tasks the record
    left it): only the task the job names with its end is charged to it; the other, which
    the job holds in its live worker, goes to the job's new record, not run again."""
    service, hub, peer, _, holder, (a, b), sink, tasks = _given_up_first()
    service.resume_job(hub, Peer(8, b"q" * 16, False, None), b"",  # type: ignore[arg-type]
                       ResumeJob({b.worker_id: [2]}, [2], {a.worker_id: [1]}))
    assert tasks[0].attempts == (a,) and tasks[1].attempts == () and service.retried == 1
    new = b.holder
    assert new is not holder and set(new.pending) == {2} and not a.pending
    again = new.peer
    service.worker_ended(hub, again, b"r", WorkerEnded(a.worker_id, -9))
    (line,) = said()
    assert "PoolWorker-10" in line and "resubmitted map(f) task 0" in line, line
    assert "task 1" not in line and "tasks" not in line, line
    relay_results(service, hub, again, [(b.worker_id, [2])])
    assert handed_to_job(hub) == [1]
    relay_results(service, hub, again, [(b.worker_id, [1])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0 and service.retried == 1


def test_a_hello_sent_again_after_the_record_was_given_up_leaves_no_task_behind() -> None:
    """As above, but a worker's hello lost with the old connection is sent again before
    ``resume_job``: it makes the job's new record. ``resume_job`` still hands that
    record what the workers it keeps hold."""
    service, hub, peer, job, (a, b) = _job()
    holder = job.holder
    assert holder is not None
    c = WorkerState(12, job.process, "PoolWorker-12", job)  # type: ignore[arg-type]
    service.add_worker(c)  # forked by the job; its hello was in flight
    sink = Sink()
    _submit(service, sink, 2)
    assert handed_to_job(hub) == [1, 2]
    peer.reset = True
    service.peer_gone(hub, peer)
    (give_up,) = [fn for _, fn in hub.timers if fn.args[0] is holder]
    give_up()
    again = Peer(8, b"q" * 16, False, None)
    service.from_workers(hub, again, b"",  # type: ignore[arg-type]
                         pack_to([(c.worker_id, [PoolOps.HELLO])]))
    new = job.holder
    assert new is not None and new is not holder and new.peer is again
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [1], b.worker_id: [2], c.worker_id: []}, [1, 2]))
    assert a.holder is new and set(new.pending) == {1, 2} and not a.pending
    assert handed_to_job(hub) == []  # b holds task 2: nothing runs again
    relay_results(service, hub, again, [(a.worker_id, [1]), (b.worker_id, [2])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0 and not new.pending


def test_jobs_taking_tasks_as_a_whole_each_take_one_a_worker_before_any_takes_more() -> None:
    """`Dispatching._fill`: a job handed tasks as a whole takes, in one step, the tasks
    one at a time would have given it (a task for each of its workers), in one message;
    then the next job does; what their credit leaves stays queued."""
    service = PoolService(b"pool", 4, None, 3, lambda ws, expected: None)
    hub = Hub()
    service.server = hub  # type: ignore[assignment]
    service.functions[1] = [b"f"]
    holders = []
    for n in (1, 2):
        process = JobProcess(n)
        job = PoolJob(process, forks=True)  # type: ignore[arg-type]
        states = [WorkerState(10 * n + i, process, f"PoolWorker-{10 * n + i}",  # type: ignore[arg-type]
                              job) for i in range(2)]
        for ws in states:
            service.add_worker(ws)
        service.from_workers(hub, Peer(n, bytes([n]) * 16, False, None), b"",  # type: ignore[arg-type]
                             pack_to([(ws.worker_id, [PoolOps.HELLO]) for ws in states]))
        holders.append(job.holder)
    hub.sent.clear()
    _submit(service, Sink(), 5)
    sent = {peer.peer_id: [t[0] for wid, body in unpack_to(frames[2:])
                           if wid == JOB_ID and bytes(body[0]) == PoolOps.TASKS
                           for t in unpack_tasks(list(body[1:]))]
            for peer, frames in hub.sent}
    assert len(hub.sent) == 2  # one message a job
    assert sorted(sent.values()) == [[1, 2], [3, 4]]  # in turn, a task a worker each
    assert [sorted(h.pending) for h in holders] == [sent[1], sent[2]]
    assert [t.task_id for t in service.queue] == [5]  # a credit of one a worker, used


def test_a_hello_sent_again_before_resume_job_leaves_the_jobs_tasks_to_its_resume() -> None:
    """The order a reset makes when a worker's hello was lost with the connection: the
    job connects again and its transport sends what was lost first (the ``from`` with
    that hello), then asks ``resume_job``, naming what it holds. The tasks the master
    had handed it and that were lost in flight go back to the queue and out again, as
    without the hello; the record does not take the new connection before its resume."""
    service, hub, peer, job, (a, b) = _job()
    holder = job.holder
    assert holder is not None
    c = WorkerState(12, job.process, "PoolWorker-12", job)  # type: ignore[arg-type]
    service.add_worker(c)  # forked by the job; its hello was in flight
    sink = Sink()
    tasks = _submit(service, sink, 2)
    assert handed_to_job(hub) == [1, 2] and set(holder.pending) == {1, 2}
    peer.reset = True
    service.peer_gone(hub, peer)  # the two tasks were lost in flight with the reset
    assert holder.resume_by and not holder.connected
    again = Peer(8, b"q" * 16, False, None)
    service.from_workers(hub, again, b"",  # type: ignore[arg-type]
                         pack_to([(c.worker_id, [PoolOps.HELLO])]))
    assert holder.resume_by and holder.peer is None  # not taken back by a hello
    assert handed_to_job(hub) == []
    service.resume_job(hub, again, b"",  # type: ignore[arg-type]
                       ResumeJob({a.worker_id: [], b.worker_id: [], c.worker_id: []}, []))
    status, payload = hub.replies[-1]
    assert status == b"ok" and sorted(Kept.decode(payload).worker_ids) == [10, 11, 12]
    assert c.connected and not c.lost  # kept, not stopped by its job
    assert not holder.resume_by and holder.peer is again
    assert sorted(handed_to_job(hub)) == [1, 2]  # lost in flight: handed out again
    relay_results(service, hub, again, [(a.worker_id, [1]), (b.worker_id, [2])])
    assert sorted(sink.got) == [0, 1] and service.outstanding == 0
    assert [t.task_id for t in tasks] == [1, 2]


def test_a_from_message_takes_hellos_only_and_refuses_anything_else_loudly() -> None:
    """Results come in ``results_of``: a ``from`` that carries them is a job's bug, refused
    with an error the server prints, after its hellos are taken; its results are not
    read as results (their task stays held, to come back with the job)."""
    service, hub, peer, job, (a, b) = _job()
    sink = Sink()
    tasks = _submit(service, sink, 2)
    assert handed_to_job(hub) == [t.task_id for t in tasks]
    late = WorkerState(12, a.process, "PoolWorker-12", job)
    service.add_worker(late)
    mixed = pack_to([(a.worker_id, [PoolOps.RESULTS, *pack_results([(1, True, [b"r"])], 0.001)]),
                     (late.worker_id, [PoolOps.HELLO])])
    with pytest.raises(ValueError, match="hellos only"):
        service.from_workers(hub, peer, b"", mixed)  # type: ignore[arg-type]
    assert late.connected and late.holder is job.holder
    assert sink.got == [] and list(job.holder.pending) == [1, 2]


def test_a_worker_waited_for_is_settled_by_its_job_after_a_sibling_is_replaced() -> None:
    """The pool lost worker 10 of a live job (its end to be told by its job: it waits in
    ``awaiting``, counted among the pool's workers). Worker 11's end was then told and a
    worker was forked in its place (`PoolCore._replace_in`), which dropped the lost
    workers with no warning pending from the job's list, 10 with them: when the job
    ended, 10 was never settled, and the pool counted it for ever (one worker short)."""
    service, hub, peer, job, states = _job(3)
    service.closing = True  # (10 is lost as asked: no warning pending for it)
    service.worker_lost(states[0])
    assert 10 in service.awaiting
    service.closing = False
    core: Any = PoolCore.__new__(PoolCore)  # (the maintainer's part that forks in a job)
    core.service, core.state, core.size, core.broken = service, RUN, 3, None
    core._worker_ids = iter(range(20, 30))
    service.replace_in = core._replace_in
    service.worker_ended(hub, peer, b"", WorkerEnded(11, 1, []))  # type: ignore[arg-type]
    assert [ws.worker_id for ws in job.workers] == [10, 12, 20]  # (11's end: said)
    service.job_ended(job, 0)
    assert service.awaiting == {} and service.active() == 0
