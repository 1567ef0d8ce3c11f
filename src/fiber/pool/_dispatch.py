"""How a pool's master hands its tasks out (`Dispatching`, a part of `PoolService`).

- Each queued task goes to the least-loaded worker that has credit for it
  (`_credit.credit`: how many tasks of that function a worker may hold), so that a
  map's tasks spread over the workers: every idle worker gets one before any gets a
  second. The cost is per task handed out, not per worker (`ReadyWorkers`).
- Workers on slow links are then topped up to the credit that covers their round trip
  (`_dispatch_far`, see `_credit.link_credit`).
- A task late on its worker (`_late`) is copied to an idle worker while nothing is
  queued; the first result is kept.
- What one dispatch gives the workers of a job of several goes in one message to the
  job, which relays it (see `_group`).
"""

from __future__ import annotations

import time
from typing import Any, Deque, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..transport.serialization import Frame
from ..transport.server import Peer
from . import _credit, _late
from ._protocol import PoolOps, WireTask, pack_task, pack_tasks, pack_to, remember
from ._reconnect import Reconnections
from ._state import ReadyWorkers, Task, WorkerState

__all__ = ["Dispatching"]


class _Credits(Dict[int, int]):
    """Each function's credit for one `Dispatching.dispatch` (`_credit.credit`: how many
    of its tasks a worker may hold), by function id: worked out on first use, then a
    dict's lookup (``__missing__``), once a task."""

    __slots__ = ("task_seconds", "prefetch")

    def __init__(self, task_seconds: Dict[int, float], prefetch: int) -> None:
        super().__init__()
        self.task_seconds = task_seconds
        self.prefetch = prefetch

    def __missing__(self, fid: int) -> int:
        credit = self[fid] = _credit.credit(self.task_seconds.get(fid), self.prefetch)
        return credit


class Dispatching(Reconnections):
    """A pool's service, as far as handing tasks out goes: its subclass, `PoolService`,
    keeps the queue, the workers and what they hold."""

    queue: Deque[Task]
    queued_items: int
    ready: ReadyWorkers
    far: _credit.FarWorkers[WorkerState]
    maxtasks: Optional[int]
    prefetch: int
    functions: Dict[int, List[Any]]
    task_seconds: Dict[int, float]
    late_factor: float
    late_timer: Optional[Any]
    outstanding: int
    copies: int
    suspects: Dict[str, float]

    def _can_take(self, ws: WorkerState) -> bool:
        if ws.whole:  # a job's record (see `_jobs`): while it has live workers, also
            # in a job nothing is forked in any more (``alive``): one of its workers
            # told to go (a signal to it, not to the job) leaves its siblings working
            return ws.width > 0 and ws.connected and not ws.lost
        if ws.holder is not ws:
            return False  # its job takes its tasks
        if ws.pending and next(iter(ws.pending.values())).suspect:
            return False  # a suspect runs alone
        return (ws.connected and not ws.lost and not ws.retiring and not ws.stopped
                and (self.maxtasks is None or ws.assigned < self.maxtasks))

    def _refresh(self, ws: WorkerState) -> None:
        """Refile ``ws`` in `ready` after what it holds or its state changed (a worker
        whose job takes its tasks: its job, whose live workers may have changed)."""
        if ws.holder is not ws:
            self._rewidth(ws.holder)
        else:
            self.ready.put(ws, self._can_take(ws))

    def dispatch(self) -> None:
        """Hand queued tasks out, each to the least-loaded worker that has credit for it,
        so that a map's tasks spread over the workers (every idle worker gets one before
        any gets a second); then top up the workers on slow links (`_dispatch_far`). The
        cost is per task handed out, not per worker."""
        queue, ready = self.queue, self.ready
        credits = _Credits(self.task_seconds, self.prefetch)
        batches: Dict[WorkerState, List[Task]] = {}
        while queue:
            ws = ready.take()  # filed again by `_hand`, or put back where it was
            if ws is None:
                break
            task = queue[0]
            if task.suspect and ws.pending and not ws.whole:
                ready.put(ws, True)
                break  # only an idle worker takes a suspect, and none is idle
            if len(ws.pending) >= credits[task.fid] * ws.width:  # (a job's record: for its workers)
                ready.put(ws, True)
                break  # the least-loaded worker is full: so is every other on a fast link
            queue.popleft()
            self.queued_items -= task.items
            if ws.whole:
                if not self._fill(ws, task, credits, batches):
                    break  # its credit is used: so is every other's on a fast link
                continue
            self._hand(ws, task, batches)
        if queue and self.far:
            self._dispatch_far(batches)
        self._send(batches)

    def _send(self, batches: Dict[WorkerState, List[Task]]) -> None:
        """Send each worker its tasks: what the workers of one job get goes in one
        message to the job (see `_group`)."""
        relayed: Dict[Peer, List[Tuple[WorkerState, List[Any]]]] = {}
        for ws, tasks in batches.items():
            self._send_tasks(ws, tasks, relayed)
        for peer, messages in relayed.items():
            assert self.server is not None
            if not self.server.send(peer, [b"", PoolOps.TO, *pack_to(
                    [(ws.worker_id, body) for ws, body in messages])]):
                for ws, _ in messages:
                    self.worker_lost(ws)

    def _dispatch_far(self, batches: Dict[WorkerState, List[Task]]) -> None:
        """Top up the workers on slow links, the least loaded first, to the credit that
        covers their round trip (see `_credit.link_credit`); a suspect task waits for
        an idle worker (`dispatch`)."""
        queue = self.queue
        for ws in self.far.by_load():
            rtt = ws.link.rtt if ws.link is not None else 0.0
            while queue and ws.load >= 0 and (ws.whole or not queue[0].suspect):
                task = queue[0]
                if len(ws.pending) >= ws.width * _credit.link_credit(
                        self.task_seconds.get(task.fid), self.prefetch, rtt):
                    break
                queue.popleft()
                self.queued_items -= task.items
                self._hand(ws, task, batches)

    def _fill(self, holder: WorkerState, task: Task, credits: _Credits,
              batches: Dict[WorkerState, List[Task]]) -> bool:
        """``task``, then the next queued ones, to ``holder`` (a job's record: the job
        takes its tasks as a whole) while what it holds a worker stays the same: the
        tasks `dispatch` would hand it one by one, since the record it refiles comes
        first again (see `ReadyWorkers`), for one take and one refiling. False: its
        credit for the next task is used."""
        queue, pending, width = self.queue, holder.pending, holder.width
        level = len(pending) // width
        maxtasks = self.maxtasks
        batch = batches.get(holder)
        if batch is None:
            batch = batches[holder] = []
        room = True
        while True:
            self._held(holder, task)
            batch.append(task)
            if (not queue or len(pending) // width != level
                    or (maxtasks is not None and holder.assigned >= maxtasks)):
                break
            task = queue[0]
            if len(pending) >= credits[task.fid] * width:
                room = False
                break
            queue.popleft()
            self.queued_items -= task.items
        self.ready.put(holder, maxtasks is None or holder.assigned < maxtasks)
        return room

    def _held(self, ws: WorkerState, task: Task) -> None:
        """``ws`` holds ``task`` from now."""
        task.held_by += 1
        if not ws.pending:
            ws.since = time.monotonic()
            if ws.tcp:  # its link's round trip is measured (see _credit)
                ws.probe = ws.since
        ws.pending[task.task_id] = task
        ws.assigned += 1

    def _hand(self, ws: WorkerState, task: Task, batches: Dict[WorkerState, List[Task]]) -> None:
        """``task`` goes to ``ws`` (in ``batches``, sent by the caller)."""
        self._held(ws, task)
        # `_refresh` inlined (the cost is per task): ``ws`` could take a task, so only
        # this task (a suspect runs alone) or ``maxtasks`` can stop it now
        maxtasks = self.maxtasks
        self.ready.put(ws, (not task.suspect or ws.whole)
                       and (maxtasks is None or ws.assigned < maxtasks))
        batch = batches.get(ws)
        if batch is None:
            batches[ws] = [task]
        else:
            batch.append(task)

    def _send_tasks(self, ws: WorkerState, tasks: List[Task],
                    relayed: Dict[Peer, List[Tuple[WorkerState, List[Any]]]]) -> None:
        """Send ``tasks`` to ``ws``; a relayed worker's are added to ``relayed`` (its
        job's message: ``[op, *payload]`` a worker), for the caller to send."""
        functions = ws.functions
        body: List[Frame]
        if ws.whole:
            self._send_job(ws, tasks, relayed)
            return
        if len(tasks) == 1 and tasks[0].fid in functions:  # the usual: one task, its
            task = tasks[0]  # function known (a round of one task a worker)
            remember(functions, task.fid, None)
            body = pack_task(task.task_id, task.fid, task.frames)
        else:
            body = [PoolOps.TASKS, *pack_tasks(self._wire(functions, tasks))]
        assert self.server is not None and ws.peer is not None
        if ws.relayed:
            relayed.setdefault(ws.peer, []).append((ws, body))
        elif not self._push(ws, [b"", *body]):
            self.worker_lost(ws)

    def _send_job(self, holder: WorkerState, tasks: List[Task],
                  relayed: Dict[Peer, List[Tuple[WorkerState, List[Any]]]]) -> None:
        """``tasks`` for a job that spreads them (see `_jobqueue`): with the credit of a
        worker, when it changed, and the suspects apart (each runs alone there)."""
        assert holder.peer is not None
        messages = relayed.setdefault(holder.peer, [])
        credit = _credit.credit(self.task_seconds.get(tasks[0].fid), self.prefetch)
        if credit != holder.credit:
            holder.credit = credit
            messages.append((holder, [PoolOps.CREDIT, b"%d" % credit]))
        plain = [task for task in tasks if not task.suspect]
        if plain:
            messages.append((holder, [PoolOps.TASKS,
                                      *pack_tasks(self._wire(holder.functions, plain))]))
        if len(plain) < len(tasks):
            alone = [task for task in tasks if task.suspect]
            messages.append((holder, [PoolOps.ALONE,
                                      *pack_tasks(self._wire(holder.functions, alone))]))

    def _wire(self, functions: Dict[int, None],
              tasks: List[Task]) -> List[WireTask]:
        """``tasks`` as the wire carries them, each with its function's frames if the
        worker does not keep it (``functions``: its LRU of function ids, updated)."""
        wire: List[WireTask] = []
        last = fn = None
        for task in tasks:
            fid = task.fid
            if fid != last:  # (a batch's tasks mostly share their function: used once)
                fn = None if fid in functions else self.functions[fid]
                remember(functions, fid, None)
                last = fid
            elif fn is not None:  # its frames go with its first task only
                fn = None
            wire.append((task.task_id, fid, fn, task.frames))
        return wire

    def _schedule_late(self) -> None:
        if self.server is not None:
            self.late_timer = self.server.call_later(_late.CHECK_S, self._check_late)

    def _holding(self) -> List[WorkerState]:
        """What may hold tasks: the workers, and the records of jobs handed tasks whole,
        also those a reset keeps waiting for their job (see `_reconnect`): not among
        ``holders`` then, and as late as a silent host's once their wait is long."""
        records = {id(h): h for h in self.holders.values()}
        for ws in self.workers.values():
            record = ws.holder
            if record is not None and record is not ws and record.resume_by:
                records[id(record)] = record
        return [*self.workers.values(), *records.values()]

    def suspected_hosts(self) -> FrozenSet[str]:
        """Hosts to place no new worker on (see `_late.suspected`)."""
        return _late.suspected(self._holding(),
                               self.suspects, self.task_seconds,
                               self.late_factor, time.monotonic())

    def _check_late(self) -> None:
        """(A hub timer, every ``_late.CHECK_S`` while tasks are outstanding.) While
        workers idle with nothing queued, copy the late tasks to them (see `_late`)."""
        self.late_timer = None
        if self.outstanding <= 0 or self.late_factor <= 0:
            return  # (the next submit sets the timer again)
        self._schedule_late()
        idle = self.ready.idle() if not self.queue else []
        if not idle:
            return
        late = _late.late_tasks(self._holding(), self.task_seconds,
                                self.late_factor, time.monotonic())
        batches: Dict[WorkerState, List[Task]] = {}
        for task, holder, ran in late:
            copy = _late.pick_idle(idle, holder)
            if copy is None:
                break
            if copy is holder:  # (a job's record with a free worker: not its own copy)
                continue
            self._hand(copy, task, batches)
            self.copies += task.items
            _late.said(task, holder, ran, self.task_seconds.get(task.fid), copy)
        self._send(batches)

    def _push(self, ws: WorkerState, frames: Sequence[Frame]) -> bool:
        """Send ``[b"", op, *payload]`` to worker ``ws``: on its connection, or through
        its job's (``[b"", to, worker id, op, *payload]``: see `_group`)."""
        assert self.server is not None and ws.peer is not None
        if ws.relayed:
            frames = [b"", PoolOps.TO, *pack_to([(ws.worker_id, frames[1:])])]
        return self.server.send(ws.peer, frames)
