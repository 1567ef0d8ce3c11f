"""Late tasks run again elsewhere, the first result kept (``fiber.pool._late``), driven
through the master's scheduler with a recording server as ``test_pool_dispatch.py``: the
hub's timers are kept and fired by the test, and "late" is made by moving back the time
at which a worker's task started (``WorkerState.since``), as a cut-off host's would be.

Issue 45: a silent or slow host's tasks (or those held behind one of a heavy tail) run
again on an idle worker once clearly late; results stay exactly once."""

from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from test_pool_dispatch import RecordingServer

from fiber.pool import _late
from fiber.pool._protocol import PoolOps, WorkerHello, pack_results, pack_to
from fiber.pool._service import PoolService, Task, WorkerState
from fiber.transport.peers import Peer

from fiber_ci.pool_service import job_service

FID = 1


class TimedServer(RecordingServer):
    """As `RecordingServer`, keeping the timers set (fired by `fire`)."""

    def __init__(self) -> None:
        super().__init__()
        self.timers: List[Callable[[], None]] = []

    def call_later(self, delay: float, fn: Callable[[], None]) -> Any:
        self.timers.append(fn)
        return types.SimpleNamespace(cancel=lambda: None)

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for fn in timers:
            fn()


class CountingSink:
    def __init__(self) -> None:
        self.delivered: List[Tuple[int, bool]] = []

    def deliver(self, index: int, ok: bool, frames: List[Any]) -> None:
        self.delivered.append((index, ok))


def bare_service(maxtasks: Optional[int] = None) -> Tuple[PoolService, TimedServer]:
    """A service with no worker yet and function ``FID`` known; its server keeps what is
    sent and the timers set, and takes every reply."""
    service = PoolService(b"pool-test", prefetch=2, maxtasks=maxtasks, max_retries=3,
                          on_worker_gone=lambda ws, expected: None)
    server = TimedServer()
    server.reply = lambda *args, **kw: True  # type: ignore[method-assign]
    service.server = server  # type: ignore[assignment]
    service.functions[FID] = [b"function"]
    service.cached_functions.add(FID)
    return service, server


def pool_of(hosts: List[str]) -> Tuple[PoolService, TimedServer, List[Peer]]:
    """A service with a worker on each of ``hosts`` (connected), copies on."""
    service, server = bare_service()
    service.late_factor = 4.0
    peers = []
    for worker_id, host in enumerate(hosts, 1):
        process = types.SimpleNamespace(name=f"PoolWorker-{worker_id}", host=host,
                                        cancelled=False, exitcode=None, job_id="")
        service.add_worker(WorkerState(worker_id, process=process))  # type: ignore[arg-type]
        peer = Peer(100 + worker_id, b"job", True, None)
        service.hello(server, peer, b"", WorkerHello(worker_id))  # type: ignore[arg-type]
        peers.append(peer)
    return service, server, peers


def answer(service: PoolService, server: TimedServer, peer: Peer, task_ids: List[int]) -> None:
    payload = pack_results([(i, True, [b"result"]) for i in task_ids], 0.02 * len(task_ids))
    service.results(server, peer, b"", payload)  # type: ignore[arg-type]


def held(server: TimedServer, peer: Peer) -> List[int]:
    return [t for p, t in server.tasks_sent() if p == peer.peer_id]


def test_a_late_workers_tasks_run_again_on_another_host_and_are_delivered_once():
    service, server, (slow, fast) = pool_of(["node1", "node2"])
    service.task_seconds[FID] = 0.01  # quick: a worker holds several
    sink = CountingSink()
    service.submit([Task(i, sink, i, FID, [b"arg"], "map(f)") for i in range(1, 7)])
    mine, theirs = held(server, slow), held(server, fast)
    assert len(mine) == 3 and len(theirs) == 3
    answer(service, server, fast, theirs)  # node2's worker is done and idles
    server.fire()
    assert held(server, fast) == theirs  # not late yet: nothing copied
    ws = service.by_peer[slow.peer_id]
    ws.since -= _late.LATE_MIN_S + 0.5  # node1's worker has not answered for 1.5 s
    server.fire()
    copied = held(server, fast)[len(theirs):]
    # one task a check to an idle worker: first those held behind the one it runs (late
    # for certain: the one running may just be long, and may wait for them)
    assert copied == [mine[1]]
    assert service.copies == 1
    answer(service, server, fast, copied)
    assert sorted(sink.delivered) == sorted((i, True) for i in theirs + copied)
    server.fire()  # the next: it idles again, and node1's third task is late too
    assert held(server, fast)[len(theirs) + 1:] == [mine[2]]
    answer(service, server, slow, mine)  # node1 answers at last: all three
    delivered = [index for index, _ in sink.delivered]
    assert sorted(delivered) == list(range(1, 7)), sink.delivered  # each once
    answer(service, server, fast, [mine[2]])  # the copy's late result: dropped
    assert len(sink.delivered) == 6


def test_a_task_held_behind_a_long_one_is_copied_before_the_long_one():
    """The long task may wait for those held behind it (a gate set once they are done):
    its copy would wait too, so the idle worker gets the one behind it first."""
    service, server, (a, b) = pool_of(["node1", "node2"])
    service.task_seconds[FID] = 0.01
    service.submit([Task(i, CountingSink(), i, FID, [b"arg"], "map(f)") for i in (1, 2, 3, 4)])
    holder = service.by_peer[a.peer_id]
    other = service.by_peer[b.peer_id]
    answer(service, server, b, list(other.pending))  # node2 done: it idles
    running, behind = list(holder.pending)[:2]
    holder.since -= _late.LATE_MIN_S + 0.5
    server.fire()
    assert list(other.pending) == [behind], (running, behind, other.pending)


def test_nothing_is_copied_while_tasks_are_queued_or_the_function_is_not_measured():
    service, server, (slow, fast) = pool_of(["node1", "node2"])
    sink = CountingSink()
    service.submit([Task(1, sink, 0, FID, [b"arg"], "apply(f)")])  # not measured
    ws = next(w for w in service.workers.values() if w.pending)
    ws.since -= 100
    server.fire()
    assert len(server.tasks_sent()) == 1 and service.copies == 0
    service.task_seconds[FID] = 30.0  # measured, and slow: late after 120 s
    server.fire()
    assert service.copies == 0
    ws.since -= 100
    server.fire()
    assert service.copies == 1


def one_task_copied(retry_raised: bool = False) -> Tuple[
        PoolService, TimedServer, CountingSink, WorkerState, WorkerState, Dict[int, Peer]]:
    """Two workers on two hosts, one task late on one (its ``holder``) and copied to the
    ``other``; last, each worker's peer by its worker id."""
    service, server, peers = pool_of(["node1", "node2"])
    service.retry_raised = retry_raised
    service.task_seconds[FID] = 0.02
    sink = CountingSink()
    service.submit([Task(1, sink, 0, FID, [b"arg"], "apply(f)")])
    holder = next(w for w in service.workers.values() if w.pending)
    other = next(w for w in service.workers.values() if w is not holder)
    holder.since -= 10
    server.fire()
    assert service.copies == 1 and list(other.pending) == [1]
    return service, server, sink, holder, other, {
        service.by_peer[p.peer_id].worker_id: p for p in peers}


def test_a_task_whose_copy_lives_is_not_queued_again_when_its_holder_dies():
    service, _, _, holder, other, _ = one_task_copied()
    service.worker_lost(holder)
    assert not service.queue  # its copy runs on the other worker
    service.worker_lost(other)
    assert [t.task_id for t in service.queue] == [1]  # the last holder gone: queued once


def test_no_copies_with_pool_late_factor_0():
    service, server, (a, b) = pool_of(["node1", "node2"])
    service.late_factor = 0.0
    service.task_seconds[FID] = 0.02
    service.submit([Task(1, CountingSink(), 0, FID, [b"arg"], "apply(f)")])
    next(w for w in service.workers.values() if w.pending).since -= 10
    assert not server.timers
    server.fire()
    assert service.copies == 0


def test_a_silent_workers_host_is_suspected_until_a_worker_there_is_heard():
    """A worker holding a task not heard for longer than the task's lateness: its host
    is suspected (no new worker goes there: `JobSpec.avoid_hosts`), also once it is lost
    (for `_late.SUSPECT_S`), until a worker on that host is heard again."""
    service, server, (a, b) = pool_of(["node1", "node2"])
    service.task_seconds[FID] = 0.01
    service.submit([Task(i, CountingSink(), i, FID, [b"arg"], "map(f)") for i in (1, 2)])
    assert service.suspected_hosts() == frozenset()
    cut = service.by_peer[a.peer_id]
    cut.since -= _late.LATE_MIN_S + 1  # node1 silent past the task's lateness
    assert service.suspected_hosts() == {"node1"}
    service.worker_lost(cut)
    assert service.suspected_hosts() == {"node1"}  # lost: still suspected
    service.suspects["node1"] -= _late.SUSPECT_S + 1
    assert service.suspected_hosts() == frozenset()  # for SUSPECT_S only
    service.suspects["node1"] = 1e18
    late = WorkerState(9, types.SimpleNamespace(  # type: ignore[arg-type]
        name="PoolWorker-9", host="node1", cancelled=False, exitcode=None, job_id=""))
    service.add_worker(late)
    service.hello(server, Peer(200, b"job", True, None), b"",  # type: ignore[arg-type]
                  WorkerHello(9))
    assert service.suspected_hosts() == frozenset()  # a worker there is heard


def test_an_idle_or_unmeasured_worker_is_never_silent():
    service, server, (a, b) = pool_of(["node1", "node2"])
    for ws in service.workers.values():
        ws.since -= 1000  # idle for long: nothing is late
    assert service.suspected_hosts() == frozenset()
    service.submit([Task(1, CountingSink(), 0, FID, [b"arg"], "apply(f)")])  # unmeasured
    assert service.suspected_hosts() == frozenset()
    service.task_seconds[FID] = 0.01  # measured: handed its task just now, not silent
    assert service.suspected_hosts() == frozenset()


def _late_copy(max_retries: int) -> Tuple[PoolService, TimedServer, CountingSink, Task,
                                          WorkerState, WorkerState]:
    """Task 1 late on worker A and copied to the idle worker B: both hold it."""
    service, server, _ = pool_of(["node1", "node2"])
    service.max_retries = max_retries
    service.task_seconds[FID] = 0.02
    sink = CountingSink()
    task = Task(1, sink, 0, FID, [b"arg"], "apply(f)")
    service.submit([task])
    a = next(w for w in service.workers.values() if w.pending)
    b = next(w for w in service.workers.values() if w is not a)
    a.since -= 10
    server.fire()
    assert service.copies == 1 and list(b.pending) == [1] and task.held_by == 2
    return service, server, sink, task, a, b


def test_a_copys_worker_lost_is_not_charged_to_the_task_its_original_runs() -> None:
    """pool_max_task_retries=0: the copy's worker dies (its host preempted) while the
    original still runs the task: the task does not fail with WorkerLostError (it did),
    and the original's result comes."""
    service, server, sink, task, a, b = _late_copy(0)
    b.exitcode, b.process.exit_reason = -9, ""
    service.worker_lost(b)
    server.fire()
    assert sink.delivered == [] and task.attempts == ()
    assert a.peer is not None
    answer(service, server, a.peer, [1])
    assert sink.delivered == [(0, True)]


def test_the_originals_worker_lost_is_not_charged_to_the_task_its_copy_runs() -> None:
    service, server, sink, task, a, b = _late_copy(0)
    a.exitcode, a.process.exit_reason = -9, ""
    service.worker_lost(a)  # the slow host is lost at last
    server.fire()
    assert sink.delivered == [] and task.attempts == ()
    assert b.peer is not None
    answer(service, server, b.peer, [1])
    assert sink.delivered == [(0, True)]


def test_a_worker_lost_holding_a_task_its_copy_answered_says_no_workerlosterror() -> None:
    """The copy answered task 1; then its slow original's worker is lost holding it: its
    warning said the task "fails with WorkerLostError", though its result had come."""
    service, server, sink, task, a, b = _late_copy(0)
    assert b.peer is not None
    answer(service, server, b.peer, [1])
    assert sink.delivered == [(0, True)]
    service.worker_lost(a)
    assert a.loss is not None and task.attempts == ()
    assert not any("WorkerLostError" in note for note in a.loss.notes), a.loss.notes


def test_the_tasks_of_a_job_waited_for_after_a_reset_are_copied_once_late() -> None:
    """A job of two handed tasks as a whole, on node1, whose connection was reset: its
    record waits for the job to connect again (up to ``RESUME_WAIT_S``, 15 s), out of
    the pool's live records. Its tasks are as late as a silent host's: copied to the
    idle worker on node2, each result delivered once, node1 suspected meanwhile."""
    service, _hub, job, (a, b) = job_service(2)
    server = TimedServer()
    server.reply = lambda *args, **kw: True  # type: ignore[method-assign]
    service.server = server  # type: ignore[assignment]
    service.cached_functions.add(FID)
    service.late_factor = 4.0
    service.task_seconds[FID] = 0.01
    job.process.host = "node1"  # type: ignore[misc]
    relay = Peer(7, b"p" * 16, True, None)
    service.from_workers(server, relay, b"", pack_to(  # type: ignore[arg-type]
        [(a.worker_id, [PoolOps.HELLO]), (b.worker_id, [PoolOps.HELLO])]))
    lone = WorkerState(20, types.SimpleNamespace(  # type: ignore[arg-type]
        name="PoolWorker-20", host="node2", cancelled=False, exitcode=None, job_id=""))
    service.add_worker(lone)
    alone = Peer(8, b"q" * 16, True, None)
    service.hello(server, alone, b"", WorkerHello(lone.worker_id))  # type: ignore[arg-type]
    sink = CountingSink()
    service.submit([Task(i, sink, i, FID, [b"arg"], "map(f)") for i in range(1, 9)])
    record = job.holder
    assert record is not None and record.pending
    on_job = sorted(record.pending)
    answer(service, server, alone, held(server, alone))  # node2's worker idles
    relay.reset = True
    service.peer_gone(server, relay)  # type: ignore[arg-type]
    assert record.resume_by and not record.lost  # waited for, out of the live records
    record.since -= _late.LATE_MIN_S + 0.5  # silent since
    sent_before = len(held(server, alone))
    checks = [fn for fn in server.timers if getattr(fn, "__name__", "") == "_check_late"]
    server.timers = [fn for fn in server.timers if fn not in checks]  # the wait goes on
    for fn in checks:
        fn()
    copied = held(server, alone)[sent_before:]
    assert copied and set(copied) <= set(on_job), (copied, on_job)
    assert service.copies == len(copied)
    assert "node1" in service.suspected_hosts()
    answer(service, server, alone, copied)
    sent_before = len(held(server, alone))
    for fn in list(server.timers):  # the wait ends: the job did not come back
        if getattr(fn, "__name__", "") != "_check_late":
            server.timers.remove(fn)
            fn()
    assert record.lost
    rest: List[int] = []  # what no copy answered, queued again once, run on node2
    while len(held(server, alone)) > sent_before:
        batch = held(server, alone)[sent_before:]
        sent_before += len(batch)
        rest += batch
        answer(service, server, alone, batch)
    assert sorted(rest + copied) == on_job, (rest, copied, on_job)
    assert sorted(index for index, _ in sink.delivered) == list(range(1, 9))
    assert service.outstanding == 0


def test_a_copy_that_raises_while_its_original_runs_leaves_the_task_to_it() -> None:
    """With ``error_handling`` (a task that raised runs again), a copy that raises while
    the original still runs is that run again: the task is not queued (it was, and so
    was held twice at once: handed again to its original's holder, a loss then left it
    neither queued nor answered, and the map waited for ever), nor is a retry charged.
    The original's result is the task's, once."""
    service, server, sink, holder, other, peer_of = one_task_copied(retry_raised=True)
    service.results(server, peer_of[other.worker_id], b"",  # type: ignore[arg-type]
                    pack_results([(1, False, [b"error"])], 0.02))
    assert not service.queue and service.retried == 0
    assert list(holder.pending) == [1] and sink.delivered == []
    answer(service, server, peer_of[holder.worker_id], [1])  # the original: its result
    assert sink.delivered == [(0, True)] and service.outstanding == 0
