"""The pool service's side of connections reset while both ends live (see `_resume`).

A worker whose connection was reset (a lossy link, a middlebox) is *waited for*, holding
its tasks, for ``RESUME_WAIT_S``: it connects again and says which tasks it holds
(``resume``), and those it does not name, lost in flight, run again. A job of several
whose relay was reset is waited for the same way, all its workers at once, and comes back
with all of them (``resume_job``). The wait's end, the job's end or a clean close of the
connection loses them as usual.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set

from .._log import info, log
from ..transport.operations import handles
from ..transport.server import Peer, Server
from . import _losses, _resume
from ._jobs import JobsOfSeveral
from ._protocol import Kept, PoolOps, Resume, ResumeJob
from ._state import PoolJob, Task, WorkerState

__all__ = ["Reconnections"]


class Reconnections(JobsOfSeveral):
    """A pool's service, as far as reset connections go: its subclass, `PoolService`,
    keeps the workers and their tasks (the methods below that raise
    ``NotImplementedError`` are its)."""

    closing: bool
    by_peer: Dict[int, WorkerState]
    server: Optional[Server]

    def _refresh(self, ws: WorkerState) -> None:
        """Refile ``ws`` among the workers that may take tasks."""
        raise NotImplementedError

    def _take_back(self, ws: WorkerState, kept: Iterable[int]) -> List[Task]:
        """What ``ws`` holds but ``kept`` goes back to the queue (returned)."""
        raise NotImplementedError

    def _may_resume(self, peer: Peer, ws: WorkerState) -> bool:
        """Whether ``ws``, whose connection (or its job's) ``peer`` ended, is waited for
        to connect again (see `_resume`), rather than lost now. In a closing pool, or
        retiring, only while it (or its job's record) holds tasks: lost now, they were
        charged to a worker still running them."""
        if not peer.reset or ws.lost or ws.init_failed or ws.process.cancelled:
            return False
        return not (self.closing or ws.retiring) or bool(ws.pending or ws.holder.pending)

    def _await_resume(self, server: Server, ws: WorkerState) -> None:
        """Hold ``ws``'s tasks for it until it connects again, up to ``RESUME_WAIT_S``."""
        ws.peer = None
        ws.connected = False
        ws.resume_by = time.monotonic() + _resume.RESUME_WAIT_S
        self._refresh(ws)
        server.call_later(_resume.RESUME_WAIT_S,
                          functools.partial(self._not_resumed, ws, ws.resume_by))

    def _not_resumed(self, ws: WorkerState, resume_by: float) -> None:
        """The wait that ended at ``resume_by`` is over: lost, unless it came back (or a
        later reset began a wait of its own)."""
        if ws.resume_by == resume_by and not ws.lost and not ws.connected:
            if ws.relayed and not ws.whole and ws.job is not None:  # (its workers' say it)
                ws.job.alive = False  # its job did not come back: it cannot say any more
            self.worker_lost(ws)

    @handles(PoolOps.RESUME, Resume)
    def resume(self, server: Server, peer: Peer, req_id: bytes, msg: Resume) -> None:
        """A worker whose connection was reset is back (see `_resume`), with the tasks it
        holds. Answered ``stop`` when it was given up meanwhile."""
        ws = self.workers.get(msg.worker_id)
        if ws is not None and ws.peer is not None and ws.peer is not peer:
            server.end_peer(ws.peer.peer_id, abort=True)  # its reset has not reached us
        if ws is None or ws.lost or not ws.resume_by:
            server.reply(peer, req_id, b"stop")
            return
        missing = self._resumed(peer, ws, msg.held)
        self.by_peer[peer.peer_id] = ws
        info("%s (%s) connected again after its connection was reset; %s",
             ws.name, _losses.where(ws),
             f"{_losses.tasks_text(missing)} lost in flight, run again" if missing
             else "nothing was lost")
        server.reply(peer, req_id, b"ok")
        self.dispatch()
        self._maybe_stop(ws)

    def _resumed(self, peer: Peer, ws: WorkerState, kept: Iterable[int]) -> List[Task]:
        """``ws``, waited for since a reset, is back on ``peer`` with the tasks ``kept``
        (their ids): the others it held go back to the queue (returned). Those never
        reached it: they do not count among the tasks handed to it (``maxtasksperchild``
        counts what a worker ran; it would wait for ever for one the master counted)."""
        held = len(ws.pending)
        missing = self._take_back(ws, kept)
        ws.assigned -= held - len(ws.pending)
        ws.given += tuple(_losses.given_of(missing))
        ws.peer, ws.connected, ws.resume_by = peer, True, 0.0
        ws.probe = 0.0  # its next results say how long the reset took, not its link
        ws.functions.clear()  # a function's frames may have been lost with the tasks
        self._refresh(ws)
        return missing

    def _bequeathed(self, job: PoolJob, kept: List[WorkerState], whole: Set[int],
                    ended: Mapping[int, List[int]]) -> List[Task]:
        """After `resume_job` kept ``kept``: the tasks the job's record, given up before
        the job came back, left a worker not kept (its heir, see `_drop_holder`) go to
        the job's new record if the job holds them (``whole``); those named with the
        heir's own end (``ended``) stay its, to lose; the rest were lost in flight:
        back to the queue (returned)."""
        record = job.holder if kept and job.holder is not None else None
        if record is not None and record.lost:
            record = None
        back: List[Task] = []
        for ws in job.workers:
            if ws.inherited and ws not in kept:
                own = ended.get(ws.worker_id, ())
                for task_id in ws.inherited:
                    if task_id in own and task_id not in whole:
                        continue
                    task = ws.pending.pop(task_id, None)
                    if task is not None and record is not None and task_id in whole:
                        record.pending[task_id] = task
                    elif task is not None:
                        back.append(task)
            ws.inherited = frozenset()
        if record is not None:
            self._refresh(record)
        return self._requeue(back)

    def relay_gone(self, server: Server, peer: Peer) -> None:
        """``peer``, if it was a job's relay, ended. Reset while the job may live: its
        workers are waited for, as a worker of its own job is (see `_resume`), for the job
        to connect again and take them back (`resume_job`). Else they are lost, all, and
        not replaced in the job (it cannot be asked any more). The workers it had seen
        end and not said yet are lost either way (it cannot say so any more)."""
        relayed = self.relays.pop(peer.peer_id, None)
        holder = self.holders.pop(peer.peer_id, None)  # the job's, if handed tasks whole
        if relayed is None:
            if holder is not None:
                self._drop_holder(holder)
            return
        self._count_traffic(peer)
        for worker_id, (gone, _) in list(self.awaiting.items()):
            if gone.peer is peer:
                self._settle(worker_id, gone.exitcode)
        waiting = [ws for ws in relayed.values() if self._may_resume(peer, ws)]
        if holder is not None:  # (first: its wait ends first, its tasks to a worker's)
            if waiting:
                self._await_resume(server, holder)
            else:
                self._drop_holder(holder)
        if waiting:  # the job may come back: those it cannot bring back are lost
            for gone in relayed.values():
                if gone not in waiting:
                    self.worker_lost(gone)
        else:
            for gone in relayed.values():
                if gone.job is not None:
                    gone.job.alive = False
                self.worker_lost(gone)
        for ws in waiting:
            self._await_resume(server, ws)
        if waiting:
            log("%s's connection was reset: waiting %.0f s for it to connect again",
                waiting[0].process.name, _resume.RESUME_WAIT_S)

    @handles(PoolOps.RESUME_JOB, ResumeJob)
    def resume_job(self, server: Server, peer: Peer, req_id: bytes, msg: ResumeJob) -> None:
        """A job of several whose connection was reset is back on ``peer``, naming its
        live workers, each with the ids of the tasks it holds (see `_group`). Those waited
        for are taken back, as `resume` takes a worker of its own job back (tasks lost in
        flight run again; one INFO line for the job), and those not connected yet are
        kept (their hello comes through the job); the job stops the others. Of the
        job's workers it does not name: one waited for ended meanwhile (its job says how
        once it is back: ``worker_ended``, sent again); one not started was never forked
        (the job's answer naming it was lost): it leaves the pool quietly, replaced.
        A worker the job names as ended (its end untold): the tasks it held are its, to
        lose, before the rest of what the job held is taken back; already told (the
        answer was lost): they went back then. Tasks of a worker named and not kept go
        back to the queue, as those lost in flight (it is stopped, and says nothing).
        Replied: the ids of the workers kept."""
        whole = set(msg.whole)
        for worker_id, held in msg.ended.items():  # (its end is told again, holding none)
            ws = self._of_job(worker_id)
            if ws is not None and ws.holder is not None and ws.holder is not ws:
                self._handed_back(ws, [task_id for task_id in held if task_id not in whole])
        kept: List[WorkerState] = []
        back: List[WorkerState] = []
        missing: List[Any] = []
        for worker_id in msg.held:
            ws = self.workers.get(worker_id)
            if ws is not None and ws.peer is not None and ws.peer is not peer:
                server.end_peer(ws.peer.peer_id, abort=True)  # its reset has not reached us
            # (one connected here already said hello again, lost with the old connection
            # and sent again before this: see `send_orphans`)
            if ws is None or ws.lost or not (ws.resume_by or not ws.started or ws.peer is peer):
                continue
            kept.append(ws)
        kept = [ws for ws in kept if not ws.lost]  # (a later end_peer may have lost one)
        taken = {ws.worker_id for ws in kept}
        for worker_id, held in msg.held.items():
            if worker_id not in taken:  # (the job forgets them: back to the queue)
                whole.difference_update(held)
        for ws in kept:
            if ws.resume_by:
                # what the job holds anywhere is not lost: a worker may hold tasks its
                # job's record held (its heir, the record given up first, see
                # `_drop_holder`), which the job holds in its queue or another worker
                missing += self._resumed(peer, ws, whole.union(msg.held[ws.worker_id]))
                ws.relayed = True
                self.relays.setdefault(peer.peer_id, {})[ws.worker_id] = ws
                back.append(ws)
        # (a job that keeps no worker, its last ones ended: settled now, as it ends)
        named = [*kept, *(ws for ws in map(self._of_job, msg.ended) if ws is not None)]
        job = named[0].job if named else None
        holder = job.holder if job is not None else None
        if holder is not None and holder.resume_by and not holder.lost:
            missing += self._resumed(peer, holder, whole)
            holder.credit = 0  # (told again with its next tasks)
            self.holders[peer.peer_id] = holder
        elif holder is not None and kept and (holder.lost or holder.peer is peer):
            # its record given up meanwhile: a new one (made here, or by a hello sent
            # again), which holds what its workers hold: their results are read there
            holder = self._holder(peer, kept[0])
            for ws in kept:
                if not ws.connected:
                    continue  # (not started: its hello takes the record)
                if ws not in back:  # (its hello, sent again, came first): what it
                    # inherited and the job does not hold was lost in flight
                    missing += self._take_back(ws, whole.union(msg.held[ws.worker_id]))
                ws.holder = holder
                holder.pending.update(ws.pending)
                ws.pending.clear()
            self._rewidth(holder)
        if job is not None:
            missing += self._bequeathed(job, kept, whole, msg.ended)
        for ws in list(job.workers) if job is not None else ():
            if ws.lost or ws in kept:
                continue
            if ws.resume_by and not ws.connected:
                self.worker_lost(ws)  # awaited: said once its job says how it ended
            elif not ws.started:
                ws.retired_why = "its job never started it (its answer was lost in a reset)"
                self._settle(ws.worker_id, 0)
        if back:
            info("%s (%s) connected again after its connection was reset, with %d "
                 "workers; %s", back[0].process.name, _losses.where(back[0]), len(back),
                 f"{_losses.tasks_text(missing)} lost in flight, run again" if missing
                 else "nothing was lost")
        server.reply(peer, req_id, b"ok", Kept([ws.worker_id for ws in kept]).frames())
        self.dispatch()
        for ws in back:
            self._maybe_stop(ws)
        if holder is not None and not holder.lost:
            self._stop_if_done(holder)
