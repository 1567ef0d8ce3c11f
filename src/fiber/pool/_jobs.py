"""The pool service's side of jobs of several workers (``workers_per_job``, see `_group`).

A job of several relays its workers' pool messages on its one connection: this finds
them by id in what it relays (``from``), hears how each ended (``worker_ended``), names
the one forked in its place, and loses them all at once, with one warning, when the job
ends. A job handed tasks as a whole (no ``maxtasksperchild``) has one record, its
*holder*, which holds every task of the job until its result comes. Design:
docs/contributing/workers-per-job.md.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..transport.operations import Service, handles
from ..transport.serialization import Frame
from ..transport.server import Peer, Server
from ..transport.sockets import tcp_rtt
from . import _losses
from ._credit import FarWorkers, Link, round_trip
from ._protocol import (
    JOB_ID,
    PoolOps,
    Replacement,
    WorkerEnded,
    pack_to,
    unpack_results_of,
    unpack_to,
)
from ._state import PoolJob, ReadyWorkers, Task, WorkerState

__all__ = ["JobsOfSeveral", "Heard"]

class Heard:
    """What one message's results completed: ``PoolService._results`` adds each
    worker's batch to it, and it is counted once a message (``_tally``, the link's round
    trip), for all the workers a job relays."""

    __slots__ = ("fids", "items", "busy", "sample")

    def __init__(self) -> None:
        self.fids: List[int] = []  # the function of each of their tasks
        self.items = 0  # items completed
        self.busy = 0.0  # seconds their tasks ran, as the workers measured
        #: The least sample of the link's round trip (seconds, see `_credit`) taken, or
        #: ``math.inf``: none was.
        self.sample = math.inf


class JobsOfSeveral(Service):
    """A pool's service, as far as jobs of several workers go: its subclass,
    `PoolService`, keeps the workers and loses them (the methods below that raise
    ``NotImplementedError`` are its)."""

    workers: Dict[int, WorkerState]
    closing: bool
    ready: ReadyWorkers
    maxtasks: Optional[int]
    losses: _losses.Losses
    far: FarWorkers[WorkerState]
    on_worker_gone: Callable[[WorkerState, bool], None]

    def __init__(self) -> None:
        #: Workers of jobs of several whose relay ended while their job lives, until the
        #: job reports their end: worker id -> (state, whether the end was expected).
        self.awaiting: Dict[int, Tuple[WorkerState, bool]] = {}
        #: The connections of jobs that relay their workers: peer id -> those workers.
        self.relays: Dict[int, Dict[int, WorkerState]] = {}
        #: Makes the worker a job of several forks in place of one that ended in it, if
        #: the pool needs one (set by the pool; None: it does not).
        self.replace_in: Callable[[WorkerState], Optional[WorkerState]] = lambda ws: None
        #: The holders of the jobs handed tasks as a whole, by their connection's id.
        self.holders: Dict[int, WorkerState] = {}

    # -- what the pool's service does (PoolService) ------------------------------------------

    def worker_lost(self, ws: WorkerState) -> None:
        """Lose ``ws``: its tasks back to the queue, its warning."""
        raise NotImplementedError

    def _hello(self, peer: Peer, ws: WorkerState) -> None:
        """``ws`` said hello on (or through) ``peer``: it takes tasks."""
        raise NotImplementedError

    def _results(self, peer: Peer, ws: WorkerState,
                 results: List[Tuple[int, bool, List[Frame]]], busy: float, now: float,
                 heard: Heard, holder: WorkerState) -> None:
        """A batch of ``ws``'s results (it ran them for ``busy`` seconds), heard at
        ``now``, added to ``heard``; their tasks were ``holder``'s (``ws``, or its job's
        record)."""
        raise NotImplementedError

    def _tally(self, fids: List[int], items: int, busy: float, now: float) -> None:
        """Count one message's results."""
        raise NotImplementedError

    def dispatch(self) -> None:
        """Hand out what is queued."""
        raise NotImplementedError

    queue: Any

    def _count_traffic(self, peer: Peer) -> None:
        """``peer`` carries no worker any more: its bytes are counted as gone."""
        raise NotImplementedError

    def _maybe_stop(self, ws: WorkerState) -> None:
        """Stop ``ws`` if the pool is done with it."""
        raise NotImplementedError

    def _refresh(self, ws: WorkerState) -> None:
        """Refile ``ws`` among those that may take tasks."""
        raise NotImplementedError

    def _requeue(self, tasks: List[Task]) -> List[Task]:
        """Tasks held go back to the front of the queue (those still to run: returned)."""
        raise NotImplementedError

    def _give_back(self, ws: WorkerState, tasks: List[Task],
                   now: float) -> Tuple[List[str], List[Task]]:
        """Lost ``ws`` held ``tasks``: charged, requeued, counted as retried (the
        notes of its warning, and the tasks requeued)."""
        raise NotImplementedError

    # -- jobs handed tasks as a whole ------------------------------------------------------

    def _holder(self, peer: Peer, ws: WorkerState) -> WorkerState:
        """The record of ``ws``'s job, which holds its tasks (made at its first
        worker's hello, on the job's connection ``peer``)."""
        job = ws.job
        assert job is not None
        holder = job.holder
        if holder is None or holder.lost:
            holder = job.holder = WorkerState(JOB_ID, job.process, job.process.name)
            holder.job = job  # (not one of its workers)
            holder.whole = holder.relayed = True
            holder.width = 0
        if holder.peer is not peer and not holder.resume_by:
            # (a job waited for since a reset is taken back by its `resume_job`, which
            # says what it holds: a hello sent again before it, on the new connection,
            # must not, or the tasks lost in flight would stay held, never to come)
            if holder.peer is not None:
                self.holders.pop(holder.peer.peer_id, None)
            holder.peer, holder.connected, holder.resume_by = peer, True, 0.0
            holder.tcp = peer.may_reset
            self.holders[peer.peer_id] = holder
        return holder

    def _rewidth(self, holder: WorkerState) -> None:
        """Count ``holder``'s live workers (its width) and refile it."""
        assert holder.job is not None
        holder.width = sum(1 for ws in holder.job.workers
                           if ws.connected and not (ws.lost or ws.retiring or ws.stopped))
        self.ready.put(holder, self._can_take(holder))

    def _can_take(self, ws: WorkerState) -> bool:
        """Whether ``ws`` may take a task now."""
        raise NotImplementedError

    def _drop_holder(self, holder: WorkerState) -> None:
        """``holder``'s job is lost (its connection, its process, or its wait to connect
        again ended): what it holds goes to one of its started workers not lost yet, lost
        with them by the caller (charged, named in the job's warning). With none left,
        to one lost whose end the job never told (awaited: it may have run them), lost
        now as it would have been with them; else back to the queue, uncharged: each
        task that ran was named when its worker's end was told, so these never ran."""
        if holder.lost:
            return
        holder.lost = True
        holder.connected = False
        self.ready.put(holder, False)
        self.far.forget(holder)
        if holder.peer is not None and self.holders.get(holder.peer.peer_id) is holder:
            del self.holders[holder.peer.peer_id]
        tasks = list(holder.pending.values())
        holder.pending.clear()
        assert holder.job is not None
        heir = next((ws for ws in holder.job.workers if ws.started and not ws.lost), None)
        if heir is not None:
            heir.pending.update((task.task_id, task) for task in tasks)
            heir.inherited = heir.inherited.union(task.task_id for task in tasks)
            return
        if not tasks:
            return
        untold = next((ws for ws in holder.job.workers if ws.worker_id in self.awaiting), None)
        if untold is not None:
            self._give_back_late(untold, tasks)
        else:
            self._requeue(tasks)
        self.dispatch()

    def _give_back_late(self, ws: WorkerState, tasks: List[Task]) -> None:
        """Lost ``ws``'s job names ``tasks`` as its only after the master lost it: they
        are lost now as they would have been with it (see `_give_back`), and named in its
        warning if that is not said yet."""
        notes, back = self._give_back(ws, tasks, time.monotonic())
        if ws.loss is not None:
            _losses.name_held(ws.loss, back, notes)

    def _stop_if_done(self, holder: WorkerState) -> None:
        """``holder``'s job holds nothing: stop its workers if the pool is done with them
        (after ``close()``, nothing queued; a worker that retires is stopped at once)."""
        if self.closing and not self.queue and not holder.pending and holder.job is not None:
            for ws in list(holder.job.workers):
                self._maybe_stop(ws)

    def _handed_back(self, ws: WorkerState, held: Sequence[int]) -> None:
        """``ws``, a worker of a job handed tasks as a whole, ended holding the tasks
        ``held`` (their ids, as its job counts them): they are its now, to lose. Lost
        already (its job came back from a reset without it, and tells its end only now):
        lost now as they would have been with it, once (see `_give_back`), and named in
        its warning if that is not said yet. The job's record given up meanwhile: what it
        held went to a worker of the job (its heir, see `_drop_holder`), taken from there.
        A task named again (its job asked `resume_job` again, its answer lost) was its
        already, and may have been handed to the job again since: it is left there."""
        holder = ws.holder
        tasks = self._told_held(ws, holder, held)
        if not tasks:
            return
        if not ws.lost:
            ws.pending.update((task.task_id, task) for task in tasks)
            self._refresh(holder)
            return
        self._give_back_late(ws, tasks)
        self._refresh(holder)
        self.dispatch()

    def _never_ran(self, ws: WorkerState, holder: WorkerState, held: Sequence[int]) -> None:
        """``ws`` ended before its hello holding ``held``: its job spreads what its record
        ``holder`` holds to every worker it forked (see `_group`), and a worker runs tasks
        only after its hello. They go back to the queue, charged to no one (else they
        stayed held by the record for ever: no result, and the job never let go)."""
        tasks = self._told_held(ws, holder, held)
        if tasks:
            self._requeue(tasks)
            self._refresh(holder)

    def _told_held(self, ws: WorkerState, holder: WorkerState,
                   held: Sequence[int]) -> List[Task]:
        """The tasks of ``held`` (ids) that ``ws``'s job says it ended holding, taken
        from ``holder``, its job's record (or, that record given up, its heir); those
        told before (a ``resume_job`` asked again) are left where they are."""
        owners = [holder]
        if holder.lost and holder.job is not None:
            owners += holder.job.workers
        told = ws.ended_with
        ws.ended_with = told.union(held)
        tasks = []
        for task_id in held:
            if task_id in told:
                continue
            for owner in owners:
                task = owner.pending.pop(task_id, None)
                if task is not None:
                    tasks.append(task)
                    break
        return tasks

    # -- jobs of several ---------------------------------------------------------------------

    @handles(PoolOps.FROM)
    def from_workers(self, server: Server, peer: Peer, req_id: bytes,
                     payload: List[Frame]) -> None:
        """Workers' ``hello``, relayed by their job (a job of several, see `_group`) on
        the job's connection, each with its worker's id (see `pack_to`). Their results
        come in ``results_of``; a job relays nothing else its workers say (a worker's
        initializer failure goes on a connection of its own)."""
        workers = self.workers
        odd = []
        for worker_id, frames in unpack_to(payload):
            if frames[0] != PoolOps.HELLO:
                odd.append(bytes(frames[0]))
                continue
            ws = workers.get(worker_id)
            if ws is None or ws.lost:  # a worker presumed dead: its tasks were reassigned
                server.send(peer, [b"", PoolOps.TO, *pack_to([(worker_id, [PoolOps.STOP])])])
                continue
            ws.relayed = True
            self.relays.setdefault(peer.peer_id, {})[worker_id] = ws
            if ws.job is not None and ws.job.forks and self.maxtasks is None:
                ws.holder = self._holder(peer, ws)  # its job takes its tasks
                ws.since = time.monotonic()
            self._hello(peer, ws)
        self._heard_from_job(peer, [], Heard(), time.monotonic())
        if odd:  # (the server prints it: a bug of the job's, not of the pool's)
            raise ValueError(f"a job relayed {sorted(set(odd))} in a 'from' message, "
                             "which holds its workers' hellos only")

    @handles(PoolOps.RESULTS_OF)
    def results_of(self, server: Server, peer: Peer, req_id: bytes,
                   payload: List[Frame]) -> None:
        """Workers' batches of results, relayed by their job in one message (see
        `pack_results_of`). What is queued is handed out once for the message, after all
        its results: one ``to`` message for the job, not one a worker."""
        now = time.monotonic()
        answered: List[WorkerState] = []
        heard = Heard()
        workers = self.workers
        for worker_id, busy, results in unpack_results_of(payload):
            ws = workers.get(worker_id)
            if ws is not None and not ws.lost and ws.connected and ws.peer is peer:
                self._results(peer, ws, results, busy, now, heard, ws.holder)
                answered.append(ws)
            elif peer.peer_id in self.holders:
                self._from_gone(peer, self.holders[peer.peer_id], results, busy, now)
        self._heard_from_job(peer, answered, heard, now)

    def _from_gone(self, peer: Peer, holder: WorkerState,
                   results: List[Tuple[int, bool, List[Frame]]], busy: float,
                   now: float) -> None:
        """Results of a worker lost meanwhile (its job came back from a reset without it,
        and sends them now): those of the tasks its job's record still holds answer them,
        once (the job holds them as a whole, whichever worker ran them: see `_group`);
        those of tasks that went back to the queue are dropped, as a lost worker's are."""
        held = [result for result in results if result[0] in holder.pending]
        if held:  # (else nothing to count, nor to draw on the dashboard's timeline)
            self._results(peer, holder, held, busy, now, Heard(), holder)
            self._stop_if_done(holder)

    def _heard_from_job(self, peer: Peer, answered: List[WorkerState], heard: Heard,
                        now: float) -> None:
        """After a job's message: count what ``answered`` (its workers that sent
        results) returned, measure the job's link, hand out what is queued, and stop the
        workers the pool is done with."""
        if answered:
            if answered[0].holder is not answered[0]:
                self._refresh(answered[0].holder)
            self._tally(heard.fids, heard.items, heard.busy, now)
            job = answered[0].job
            if job is not None and heard.sample < math.inf:  # the job's link: the least
                assert peer.conn is not None  # sample (taken over TCP only)
                link = job.link = job.link if job.link is not None else Link()
                holder = answered[0].holder
                self.far.observed(answered if holder is answered[0] else [holder], link,
                                  round_trip(heard.sample, tcp_rtt(peer.conn.sock)))
        if self.queue:
            self.dispatch()
        if answered and answered[0].holder is not answered[0]:
            self._stop_if_done(answered[0].holder)  # (its workers: with their job)
            return
        for ws in answered:  # after the dispatch: those it gave nothing may be done
            self._maybe_stop(ws)

    @handles(PoolOps.WORKER_ENDED, WorkerEnded)
    def worker_ended(self, server: Server, peer: Peer, req_id: bytes, msg: WorkerEnded) -> None:
        """A worker of a job of several ended (see `_group`). Lost, if it was not yet
        (with its exit code: its warning is said now); answered with the id of the
        worker the job forks in its place, or b"" (none needed)."""
        ws = self._of_job(msg.worker_id)
        holder = ws.holder if ws is not None and ws.holder is not ws else None
        if ws is not None and holder is not None:
            self._handed_back(ws, msg.held)
        elif ws is not None and ws.job is not None and ws.job.holder is not None:
            holder = ws.job.holder  # (it ended before its hello)
            self._never_ran(ws, holder, msg.held)
        ws = self._settle(msg.worker_id, msg.code)
        new = self.replace_in(ws) if ws is not None else None
        if holder is not None:
            self._stop_if_done(holder)
        server.reply(peer, req_id, b"ok",
                     Replacement(new.worker_id if new is not None else None).frames())

    def _of_job(self, worker_id: int) -> Optional[WorkerState]:
        """Worker ``worker_id`` of a job of several, if its end was not told yet."""
        waited = self.awaiting.get(worker_id)
        return waited[0] if waited is not None else self.workers.get(worker_id)

    def job_ended(self, job: PoolJob, code: Optional[int]) -> None:
        """``job``'s process ended with ``code``: every worker it held is lost now, each
        with the job's code unless its own end was known. Not one is replaced in it."""
        job.alive = False
        if job.holder is not None:
            self._drop_holder(job.holder)
        for ws in job.workers:
            if ws.exitcode is None:
                ws.exitcode = code
            self._settle(ws.worker_id, ws.exitcode, say=False)
        if job.forks:  # one warning for the job and the workers it took with it
            _losses.report_job(job.process.name, [ws for ws in job.workers if ws.loss])
        for ws in job.workers:
            self.losses.ready(ws)

    def wait_over(self, ws: WorkerState) -> None:
        """``_losses.REPORT_WAIT_S`` after ``ws`` was lost, its end not told: its warning is
        said now. One of a job of several lost with its job after it connected (its
        connection ended: ``alive`` false), whose end is not reported yet (a job on a
        host cut off may end only once the cut heals, past this wait): the job's one
        warning, for all its workers lost and not said, as `job_ended` would say it;
        not one a worker, each as its own wait ends."""
        job = ws.job
        if (ws.loss is not None and ws.loss.connected and job is not None and job.forks
                and not job.alive):
            _losses.report_job(job.process.name, [w for w in job.workers if w.loss])
            for other in job.workers:
                self.losses.ready(other)
        self.losses.ready(ws)

    def _settle(self, worker_id: int, code: Optional[int],
                say: bool = True) -> Optional[WorkerState]:
        """Worker ``worker_id`` ended with ``code``: lost if it was not yet, its warning
        said (``say``; else its job's says it). Returns its state (None: no worker of this
        pool now)."""
        waited = self.awaiting.pop(worker_id, None)
        ws = waited[0] if waited is not None else self.workers.get(worker_id)
        if ws is None:
            return None
        ws.exitcode = code
        if waited is not None:
            if say:
                self.losses.ready(ws)
            self.on_worker_gone(ws, waited[1])
        else:
            self.worker_lost(ws)
            if say:
                self.losses.ready(ws)
        return ws
