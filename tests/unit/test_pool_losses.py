"""How a pool's master counts and says the deaths of its workers (``PoolService.worker_lost``
and :mod:`fiber.pool._losses`), with stand-in workers: a task that kills every worker it
runs on is charged with each death that held it, prefetched among others too, and the
warnings come in the order the workers were lost, whichever job's end is known first
(issue 26). The same on real workers: fiber/testing/conformance/test_pool_crash.py."""

from __future__ import annotations

import logging
import types
from typing import Any, List, Optional

import pytest

from fiber.errors import WorkerLostError
from fiber.pool import _losses
from fiber.pool._protocol import (
    PoolOps,
    Resume,
    ResumeJob,
    WorkerEnded,
    WorkerHello,
    pack_ids,
    pack_results,
    pack_to,
)
from fiber.pool._resume import RESUME_WAIT_S
from fiber.pool._service import PoolService, Task, WorkerState
from fiber.pool._state import PoolJob
from fiber.transport.peers import Peer
from fiber.transport.remote import unpack_exception
from fiber.transport.serialization import loads

from fiber_ci.pool_service import Hub, JobProcess


class _Result:
    def __init__(self) -> None:
        self.outcome: List[Any] = []

    def deliver(self, index: int, ok: bool, frames: List[Any]) -> None:
        self.outcome.append((index, ok, frames))


class _Pool:
    """A PoolService with no hub: workers that connect, take the queue, and die."""

    def __init__(self, max_retries: int) -> None:
        self.service = PoolService(b"pool-test", 2, None, max_retries,
                                   lambda ws, expected: None)
        self.count = 0

    def worker(self) -> WorkerState:
        self.count += 1
        process = JobProcess(self.count, "PoolWorker")
        ws = WorkerState(self.count, process,  # type: ignore[arg-type]
                         job=PoolJob(process, forks=False))  # type: ignore[arg-type]
        self.service.add_worker(ws)
        return ws

    def take(self, ws: WorkerState, tasks: List[Task]) -> None:
        """``ws`` holds ``tasks`` (as dispatch would have handed them)."""
        for task in tasks:
            self.service.queue.remove(task)
            ws.pending[task.task_id] = task
            task.held_by += 1

    def die(self, ws: WorkerState, exitcode: Optional[int]) -> None:
        ws.process.exitcode = exitcode
        self.service.worker_lost(ws)


@pytest.fixture
def said(caplog: Any) -> Any:
    caplog.set_level(logging.WARNING, logger="fiber")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "fiber"]


def _tasks(pool: _Pool, result: _Result, count: int) -> List[Task]:
    tasks = [Task(i + 1, result, i, 1, [b""], "map(f)") for i in range(count)]
    pool.service.function_refs[1] += count
    pool.service.queue.extend(tasks)
    pool.service.outstanding += count
    return tasks


def test_every_death_that_held_the_task_is_counted(said):
    """The first worker dies holding the culprit among prefetched tasks (not charged
    then: any of them may have been running), then it kills each worker it runs on
    alone: with pool_max_task_retries=2 it fails at its third death, naming all three."""
    pool, result = _Pool(max_retries=2), _Result()
    culprit, *others = _tasks(pool, result, 4)
    first = pool.worker()
    pool.take(first, [culprit, *others])
    pool.die(first, -9)
    assert all(t.suspect for t in (culprit, *others))
    for task in others:  # the innocent ones complete, each alone on a worker
        pool.service.cancel(task)
    for _ in range(2):
        ws = pool.worker()
        pool.take(ws, [culprit])
        pool.die(ws, -9)
    ((index, ok, frames),) = result.outcome
    error = unpack_exception(loads(frames))
    assert (index, ok, type(error)) == (0, False, WorkerLostError)
    assert "map(f) (task 0) killed its worker 3 times" in str(error)
    attempts = [ln.strip() for ln in str(error).splitlines()[1:]]
    assert attempts == [f"attempt {i}: worker {i} (PoolWorker-{i}) killed by SIGKILL"
                        for i in (1, 2, 3)]
    counts = [m.split(" killed its worker ")[1].split(" ")[0] for m in said()
              if " killed its worker " in m]
    assert counts == ["2", "3"], said()


def test_the_warnings_come_in_the_order_the_workers_were_lost(said):
    """The second death's exit code is known first (its job's end was seen), the first's
    later: its "2 times" still comes before the "3 times"."""
    pool, result = _Pool(max_retries=5), _Result()
    (task,) = _tasks(pool, result, 1)
    deaths = []
    for code in (-9, None, -9):  # the second one's end is not known yet
        ws = pool.worker()
        pool.take(ws, [task])
        pool.die(ws, code)
        deaths.append(ws)
    assert len(said()) == 1  # the third waits for the second
    deaths[1].process.exitcode = -9
    pool.service.job_ended(deaths[1].job, deaths[1].process.exitcode)
    lines = said()
    assert [line.split(" ")[0] for line in lines] == [
        "PoolWorker-1", "PoolWorker-2", "PoolWorker-3"], lines
    assert "has killed its worker 2 times" in lines[1] and "3 times" in lines[2], lines


def test_an_initializer_failure_is_said_once_then_counted(said):
    """A traceback once; the workers that fail the same way after it are counted, said
    when the row ends; a different traceback is said in full."""
    pool = _Pool(max_retries=3)
    failures = pool.service.init_failures
    workers = [pool.worker() for _ in range(5)]
    for ws in workers[:3]:
        failures.failed(ws, "Traceback...\nValueError: one\n")
    failures.failed(workers[3], "Traceback...\nKeyError: two\n")
    failures.failed(workers[4], "Traceback...\nKeyError: two\n")
    failures.started()
    failures.started()  # nothing left to say
    lines = said()
    assert len(lines) == 4, lines
    assert lines[0].startswith("PoolWorker-1 (job 1-1 on here): the pool's initializer "
                               "raised") and lines[0].endswith("ValueError: one"), lines
    assert lines[1] == ("the pool's initializer failed the same way in 2 more workers "
                        "(PoolWorker-2, PoolWorker-3)"), lines
    assert lines[2].startswith("PoolWorker-4 ") and lines[2].endswith("KeyError: two")
    assert lines[3] == ("the pool's initializer failed the same way in 1 more worker "
                        "(PoolWorker-5); then a worker started"), lines
    assert failures.last == ""


def test_a_worker_lost_while_its_reset_connection_is_waited_for_was_lost(said):
    """A worker that said hello, whose connection was then reset (a crashed node's
    kernel: the Slurm node-crash test in CI), and whose job then ended: it "was lost"
    (not "ended before it connected"), and it is not counted as a failed start."""
    from fiber.transport.peers import Peer

    pool, hub = _Pool(max_retries=3), Hub()
    gone: List[Any] = []
    pool.service.on_worker_gone = lambda ws, expected: gone.append(ws.started)
    ws = pool.worker()
    peer = Peer(7, b"p" * 16, False, None)
    pool.service.hello(hub, peer, b"", WorkerHello(ws.worker_id))
    assert ws.connected
    peer.reset = True
    pool.service.peer_gone(hub, peer)
    assert not ws.connected and ws.resume_by > 0 and ws.started
    pool.die(ws, -9)
    assert gone == [True]
    (line,) = said()
    assert "PoolWorker-1 (job 1-1 on here) was lost: killed by SIGKILL" in line, line


def _connect(pool: _Pool, hub: Hub, ws: WorkerState, peer_id: int) -> Any:
    """``ws`` connects (hello) on a new peer, which is returned."""
    peer = Peer(peer_id, b"p" * 16, False, None)
    pool.service.hello(hub, peer, b"", WorkerHello(ws.worker_id))
    return peer


def test_a_reset_worker_holds_its_tasks_until_lost_and_names_them(said):
    """A worker's connection reset: its tasks stay its own through the wait (none goes
    back to the queue before its loss is final), then its warning names each. Both ways
    the loss becomes final: the wait ends (`_resume`), or its job's end is seen first
    (a crashed Slurm node: the kernel's reset, then NODE_FAIL)."""
    for how in ("the wait ended", "its job ended"):
        pool, hub, result = _Pool(max_retries=3), Hub(), _Result()
        ws = pool.worker()
        peer = _connect(pool, hub, ws, 7)
        pool.take(ws, _tasks(pool, result, 2))
        peer.reset = True
        pool.service.peer_gone(hub, peer)
        assert len(ws.pending) == 2 and not pool.service.queue, how
        ws.process.exitcode = -9
        if how == "the wait ended":
            ((delay, not_resumed),) = hub.timers
            assert delay == RESUME_WAIT_S
            not_resumed()
            pool.service.job_ended(ws.job, ws.process.exitcode)
        else:
            pool.service.worker_lost(ws)
            pool.service.job_ended(ws.job, ws.process.exitcode)
        assert [t.index for t in pool.service.queue] == [0, 1], how
    lines = said()
    assert len(lines) == 2, lines
    for line in lines:
        assert line.endswith("was lost: killed by SIGKILL; resubmitted map(f) tasks 0, 1"), line


def test_a_worker_lost_after_it_came_back_names_the_tasks_lost_in_flight(said):
    """A worker whose connection was reset comes back holding one of its three tasks:
    the other two, lost in flight, go back to the queue and run again (INFO). Lost
    later, its warning names them too, once each: task 1, handed to it again and held
    at its loss, is named as resubmitted only. A worker that came back and is not lost
    says nothing."""
    pool, hub, result = _Pool(max_retries=3), Hub(), _Result()
    ws = pool.worker()
    peer = _connect(pool, hub, ws, 7)
    held, *lost = _tasks(pool, result, 3)
    pool.take(ws, [held, *lost])
    peer.reset = True
    pool.service.peer_gone(hub, peer)
    again = Peer(8, b"q" * 16, False, None)
    pool.service.resume(hub, again, b"", Resume(ws.worker_id, [held.task_id]))
    assert ws.connected and not said()  # came back: no warning
    assert list(ws.pending) == [held.task_id], ws.pending
    assert list(pool.service.queue) == lost
    pool.take(ws, lost[:1])  # handed to it again
    ws.process.exitcode = -9
    pool.service.worker_lost(ws)
    (line,) = said()
    assert line.endswith("was lost: killed by SIGKILL; resubmitted map(f) tasks 0, 1; "
                         "map(f) task 2 lost in flight at an earlier reset of its "
                         "connection, run again"), line


def test_lost_tasks_are_named_by_their_items_places_as_their_labels_are():
    """A warning names a task as its label and the dashboard do (issue 44, 8): an
    ``apply`` by its number among the pool's calls (not 0 for all), a map's chunk by
    the range of its items (not the chunk's index)."""
    sink = types.SimpleNamespace(deliver=lambda *a: None)
    fifth_apply = Task(7, sink, 0, 1, [b""], "apply(g)", first=5)
    chunk = Task(8, sink, 2, 1, [b""], "map(f)", first=8, items=4)
    single = Task(9, sink, 3, 1, [b""], "map(f)", first=12)
    assert _losses.tasks_text([fifth_apply]) == "apply(g) task 5"
    assert _losses.tasks_text([chunk, single]) == "map(f) tasks 8-11, 12"
    assert _losses.tasks_text([chunk]) == "map(f) tasks 8-11"


def test_a_job_of_several_that_dies_is_one_warning_naming_its_workers_and_tasks(said):
    """Twelve workers of one job lose their relay, then the job's end is known: one
    warning, the first seven workers named and the rest counted, every task held in it;
    none is replaced in the job (it has ended)."""
    pool, result = _Pool(max_retries=5), _Result()
    tasks = _tasks(pool, result, 12)
    process = JobProcess(100, "PoolWorker")
    job = PoolJob(process, forks=True)  # type: ignore[arg-type]
    workers = []
    for i, task in enumerate(tasks):
        ws = WorkerState(200 + i, process, f"PoolWorker-{200 + i}", job)  # type: ignore[arg-type]
        pool.service.add_worker(ws)
        pool.take(ws, [task])
        workers.append(ws)
    for ws in workers:  # their relay ended first: their job is to say how
        pool.service.worker_lost(ws)
    assert said() == [] and len(pool.service.awaiting) == 12
    process.exitcode = -9
    pool.service.job_ended(job, -9)
    (line,) = said()
    assert line.startswith("PoolWorker-100 (job 1-100 on here) was lost with 12 workers "
                           "(PoolWorker-200, PoolWorker-201, "), line
    assert ", PoolWorker-206, 5 more): killed by SIGKILL; " in line, line
    assert line.endswith("resubmitted map(f) tasks 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 2 more")
    assert pool.service.awaiting == {} and not job.alive


def _relayed_job(pool: _Pool, hub: Hub, count: int, peer_id: int) -> Any:
    """A job of ``count`` workers that said hello through their job's connection (a new
    peer, returned with the job and its workers). Its workers are each handed their own
    tasks: the pool has a ``maxtasksperchild`` (never reached here), whose jobs keep that
    path; a job handed tasks as a whole: ``test_pool_job_holder``."""
    pool.service.maxtasks = 1_000_000
    process = JobProcess(100 + peer_id, "PoolWorker")
    job = PoolJob(process, forks=True)  # type: ignore[arg-type]
    workers = [WorkerState(300 + 10 * peer_id + i, process,  # type: ignore[arg-type]
                           f"PoolWorker-{300 + 10 * peer_id + i}", job) for i in range(count)]
    for ws in workers:
        pool.service.add_worker(ws)
    peer = Peer(peer_id, b"p" * 16, False, None)
    pool.service.from_workers(hub, peer, b"", pack_to([(ws.worker_id, [PoolOps.HELLO])
                                                      for ws in workers]))
    assert all(ws.connected and ws.relayed for ws in workers)
    return peer, job, workers


def test_a_job_whose_connection_was_reset_comes_back_with_the_workers_it_names(said):
    """Issue 45: a job of several whose relay is reset: its workers are waited for, not
    lost. It comes back naming two of its three (the third ended meanwhile) and one it
    had just forked: the two are taken back, the tasks it does not name run again, the
    forked one is kept; the third is lost once the job, back, says how it ended (and is
    counted until then); a worker the master named for it to fork, which it does not
    name (its answer was lost in the reset), leaves quietly."""
    pool, hub, result = _Pool(max_retries=3), Hub(), _Result()
    gone: List[Any] = []
    pool.service.on_worker_gone = lambda ws, expected: gone.append((ws.name, expected))
    pool.service.server = hub  # type: ignore[assignment]  # (what the job is sent)
    pool.service.functions[1] = [b"f"]  # (the tasks' function, as the pool keeps it)
    peer, job, (a, b, c) = _relayed_job(pool, hub, 3, 7)
    held, lost = _tasks(pool, result, 2)
    pool.take(a, [held, lost])
    forked = WorkerState(400, job.process, "PoolWorker-400", job)  # type: ignore[arg-type]
    never = WorkerState(401, job.process, "PoolWorker-401", job)  # type: ignore[arg-type]
    pool.service.add_worker(forked)
    pool.service.add_worker(never)
    peer.reset = True
    pool.service.peer_gone(hub, peer)
    assert all(ws.resume_by and not ws.connected and not ws.lost for ws in (a, b, c))
    assert job.alive and pool.service.active() == 5 and not gone
    again = Peer(8, b"q" * 16, False, None)
    pool.service.resume_job(hub, again, b"", ResumeJob(
        {a.worker_id: [held.task_id], b.worker_id: [], forked.worker_id: []}, []))
    assert hub.replies[-1] == (b"ok", [pack_ids([a.worker_id, b.worker_id, 400])])
    assert a.connected and b.connected and a.peer is again and not forked.lost
    assert list(a.pending) == [held.task_id] and list(b.pending) == [lost.task_id]  # again
    assert never.lost and gone == [("PoolWorker-401", True)]  # quietly: replaced
    assert c.lost and c.worker_id in pool.service.awaiting  # its job says how, then
    assert pool.service.active() == 4 and not said()
    pool.service.worker_ended(hub, again, b"r", WorkerEnded(c.worker_id, -9))
    assert pool.service.awaiting == {} and gone[-1] == (c.name, False)
    (line,) = said()
    assert line.startswith(f"{c.name} (job 1-107 on here) was lost: killed by SIGKILL"), line


def test_a_job_that_does_not_come_back_in_time_loses_its_workers(said):
    """The wait for a reset job's connection ends: its workers are lost, and not counted
    as awaited (their job cannot say how they ended any more): they are replaced."""
    pool, hub = _Pool(max_retries=3), Hub()
    gone: List[Any] = []
    pool.service.on_worker_gone = lambda ws, expected: gone.append(ws.name)
    peer, job, workers = _relayed_job(pool, hub, 2, 7)
    peer.reset = True
    pool.service.peer_gone(hub, peer)
    for delay, not_resumed in hub.timers:
        assert delay == RESUME_WAIT_S
        not_resumed()
    assert not job.alive and all(ws.lost for ws in workers)
    assert pool.service.awaiting == {} and gone == [ws.name for ws in workers]


@pytest.mark.parametrize("how", ["close", "shrink"])
def test_a_worker_reset_while_the_pool_closes_is_waited_for_while_it_holds_tasks(
        said, how):
    """``close()`` called (or the pool shrunk: both workers retiring), a worker still
    running its task: its connection reset (a middlebox, a lossy link) is waited for as
    before, not taken for its death. It was lost at once: its task charged
    (``pool_max_task_retries=0``: failed with `WorkerLostError` while the worker still
    ran it) and run again. It comes back and its result is the task's; an idle worker
    reset meanwhile is let go (nothing to wait for), as any worker that is to exit."""
    pool, hub, result = _Pool(max_retries=0), Hub(), _Result()
    busy, idle = pool.worker(), pool.worker()
    peer = _connect(pool, hub, busy, 7)
    other = _connect(pool, hub, idle, 9)
    (task,) = _tasks(pool, result, 1)
    pool.take(busy, [task])
    if how == "close":
        pool.service.closing = True
    else:
        assert sorted(ws.worker_id for ws in pool.service.retire(2)) == [1, 2]
    peer.reset = other.reset = True
    pool.service.peer_gone(hub, peer)
    pool.service.peer_gone(hub, other)
    assert not busy.lost and idle.lost and not said()
    assert list(busy.pending) == [task.task_id] and not pool.service.queue
    again = Peer(8, b"q" * 16, False, None)
    pool.service.resume(hub, again, b"", Resume(busy.worker_id, [task.task_id]))
    assert busy.connected and not task.attempts and result.outcome == []
    pool.service.results(hub, again, b"", pack_results([(task.task_id, True, [b"r"])], 0.1))
    assert [(i, ok) for i, ok, _ in result.outcome] == [(0, True)]
    assert pool.service.outstanding == 0 and pool.service.retried == 0 and not said()
