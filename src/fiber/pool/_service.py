"""The master side of a pool: task queue, workers' credit and pending tables, recovery. It
runs under the hub's lock; a lost worker's tasks go back to the queue, and a task's result
is accepted once. The design: docs/contributing/pools.md, "The master's side"."""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .._log import info, log
from ..transport.operations import handles
from ..transport.remote import pack_local_exception
from ..transport.serialization import Frame, dumps
from ..transport.server import Peer, Server
from ..transport.sockets import tcp_rtt
from . import _credit, _late, _losses, _renew, _resume, _retire, _status
from ._dispatch import Dispatching
from ._jobs import Heard
from ._protocol import (
    InitFailed,
    PoolOps,
    Retiring,
    WorkerHello,
    results_busy,
    unpack_results,
)
from ._state import ReadyWorkers, Task, WorkerState

__all__ = ["Task", "WorkerState", "PoolService", "describe_exit"]

describe_exit = _losses.describe_exit
exit_code = _losses.exit_code

_SPIN_TASK = 0.002  # a wait for tasks up to this long polls while they run (spin_budget)
_EXIT_POLL = 0.05



class PoolService(Dispatching):
    """One pool's scheduler on the master's hub (how it hands tasks out: `Dispatching`;
    its side of reset connections: `Reconnections`; of jobs of several workers:
    `JobsOfSeveral`)."""

    protocol = "pool"

    def __init__(self, name: bytes, prefetch: int, maxtasks: Optional[int], max_retries: int,
                 on_worker_gone: Callable[[WorkerState, bool], None],
                 spin: float = 0.0) -> None:
        self.name = name
        self.spin = spin
        self.prefetch = prefetch
        self.maxtasks = maxtasks
        self.max_retries = max_retries
        #: ``Pool(error_handling=True)``, the original fiber's: a task that raised is run
        #: again (see `_raised`), as its pool ran again a task whose worker died, which a
        #: raise did there. False: its exception is the result at once (multiprocessing).
        self.retry_raised = False
        self.on_worker_gone = on_worker_gone
        self.queue: Deque[Task] = collections.deque()
        self.queued_items = 0  # the items of the tasks in the queue (pool.status())
        self.workers: Dict[int, WorkerState] = {}
        self.ready = ReadyWorkers()
        #: Workers on slow links, which hold more tasks (see `_credit`, `_dispatch_far`).
        self.far: _credit.FarWorkers[WorkerState] = _credit.FarWorkers()
        #: ``pool_late_factor`` (0: late tasks are not copied; see `_late`), and the hub
        #: timer of the next check for them, while one is set.
        self.late_factor = 0.0
        self.late_timer: Optional[Any] = None
        self.copies = 0  # tasks (items) copied because they were late
        #: Hosts suspected since a silent worker there was lost: until when (see `_late`).
        self.suspects: Dict[str, float] = {}
        self.retiring = 0  # workers of self.workers told to finish and exit (retire)
        #: Seconds after it connects that a worker is renewed (see _renew); None: never.
        self.lifetime: Optional[float] = None
        #: Wakes the pool's maintainer (set by the pool): a renewal time is set.
        self.wake: Callable[[], None] = lambda: None
        self.by_peer: Dict[int, WorkerState] = {}
        Dispatching.__init__(self)
        self.functions: Dict[int, List[Any]] = {}  # fid -> pickled function
        self.function_refs: Dict[int, int] = collections.Counter()  # fid -> live tasks
        self.cached_functions: Set[int] = set()  # fids the pool may reuse
        self.task_seconds: Dict[int, float] = {}  # fid -> running average of a task's run
        self.server: Optional[Server] = None
        self.init_failures = _losses.InitFailures()
        self.losses = _losses.Losses()  # warnings of lost workers not said yet, in order
        self.outstanding = 0  # tasks submitted and not yet finished
        #: Tasks failing for killing their workers, their error waiting for the exit
        #: codes it names (`_give_up`): in no queue nor worker, still owed a result.
        self.giving_up: Dict[int, Task] = {}
        self.last_fid = 0  # the function of the tasks submitted last (see spin_budget)
        self.closing = False  # close() was called: workers exit once the queue is empty
        # What pool.status() shows (see ._status): places of workers, tasks counted.
        self.slots = 0
        self.free_slots: Deque[Tuple[int, int]] = collections.deque()  # (slot, restarts)
        # Counted in items (a map's chunk of 4 is 4 tasks), as users count their tasks.
        self.done = 0  # tasks that returned a value
        self.failed = 0  # tasks that failed (an exception, a lost worker, terminated)
        self.retried = 0  # tasks given back to the queue by a lost worker
        self.rate = _status.Rate()
        self.stream = _status.Stream()  # the dashboard's timeline
        # /metrics (the dashboard), counted while ``measuring`` (see the pool): how long
        # tasks ran, as their workers measured (a batch of quick tasks: each at the
        # batch's mean), and waited from their submission to their result
        self.measuring = False
        self.durations = _status.Histogram()
        self.latency = _status.Histogram()
        #: Bytes written to and read from the connections of workers gone (`traffic`).
        self.traffic_gone = [0, 0]

    # -- from the pool (under the hub lock) ----------------------------------------------

    def spin_budget(self) -> float:
        """Seconds a thread waiting for a result may poll before it sleeps (see
        ``Server.wait_serving``, which polls only while the host has a CPU to spare):
        the configured spin, plus, when the function last submitted runs quick tasks
        (``_SPIN_TASK``), their running time: a wait for such tasks (an RL or ES step of
        a few ms) then ends with this thread awake and its CPU not gone idle, which on a
        VM saves the wake-ups of both (~0.1 ms a round of 1 ms tasks here). Read without
        the lock: a stale estimate only makes one wait poll longer or shorter."""
        if not self.spin:
            return 0.0
        seconds = self.task_seconds.get(self.last_fid)
        if seconds is not None and seconds <= _SPIN_TASK:
            return self.spin + seconds
        return self.spin

    def add_worker(self, ws: WorkerState) -> None:
        if self.free_slots:
            ws.slot, ws.restarts = self.free_slots.popleft()
        else:
            self.slots += 1
            ws.slot = self.slots
        self.workers[ws.worker_id] = ws

    def _free_slot(self, ws: WorkerState) -> None:
        """``ws``'s place (slot, and its restarts) goes to its replacement: once, not if
        a renewal gave it already (`_renew.due`) and ``ws`` ends before its heir's hello."""
        if ws.renew_at != _renew.RENEWED:
            ws.renew_at = _renew.RENEWED
            self.free_slots.append((ws.slot, ws.restarts + 1))

    def active(self) -> int:
        """Workers neither lost nor retiring: what counts towards the pool's size."""
        return len(self.workers) - self.retiring + len(self.awaiting)

    def submit(self, tasks: List[Task]) -> None:
        """Queue ``tasks`` (of one call: one function) and hand out what workers can take."""
        if tasks:
            self.queue.extend(tasks)
            self.queued_items += sum(task.items for task in tasks)
            self.outstanding += len(tasks)
            self.last_fid = fid = tasks[0].fid
            self.function_refs[fid] += len(tasks)
            if self.measuring:  # for the latency histogram (0.0: submitted unmeasured)
                now = time.monotonic()
                for task in tasks:
                    task.queued = now
            if self.late_timer is None and self.late_factor > 0:
                self._schedule_late()
        self.dispatch()

    def release_function(self, fid: int) -> None:
        """Forget a function no task needs any more and no submitter will reuse."""
        if self.function_refs.get(fid, 0) <= 0 and fid not in self.cached_functions:
            self.functions.pop(fid, None)
            self.function_refs.pop(fid, None)
            self.task_seconds.pop(fid, None)

    def cancel(self, task: Task) -> bool:
        """Remove a task that no worker holds yet."""
        try:
            self.queue.remove(task)
        except ValueError:
            return False
        self.queued_items -= task.items
        task.done = True
        self.outstanding -= 1
        self.function_refs[task.fid] -= 1
        self.release_function(task.fid)
        return True

    def fail_all(self, exc: BaseException) -> None:
        """Fail every task not finished yet (pool terminated or broken)."""
        record = dumps(pack_local_exception(exc))
        tasks = [*self.queue, *self.giving_up.values()]
        self.queue.clear()
        self.queued_items = 0
        self.giving_up.clear()
        owners = {id(ws): ws for ws in [*self.workers.values(), *self.holders.values()]}
        for ws in [*self.workers.values(), *(gone for gone, _ in self.awaiting.values())]:
            owners.setdefault(id(ws.holder), ws.holder)  # (a job's record may wait for
            # its job to connect again: in no peer's table meanwhile)
        for ws in owners.values():
            tasks.extend(ws.pending.values())
            ws.pending.clear()
            self._refresh(ws)
        for task in tasks:
            self._finish(task, False, record)

    def due_renewals(self, now: float) -> List[WorkerState]:
        """The workers whose renewal is due now, each once (see `_renew`)."""
        return _renew.due(list(self.workers.values()), now, self.free_slots)

    def next_renewal(self) -> Optional[float]:
        """When the next renewal is due (monotonic), if any."""
        return _renew.next_at(self.workers.values())

    def retire(self, count: int) -> List[WorkerState]:
        """Let ``count`` workers finish what they hold and exit (shrinking the pool)."""
        active = [ws for ws in self.workers.values() if not ws.retiring and not ws.lost]
        active.sort(key=lambda ws: (ws.connected, len(ws.pending)))
        chosen = active[:count]
        for ws in chosen:
            ws.retiring = True
            self.retiring += 1
            self._refresh(ws)
            self._maybe_stop(ws)
        return chosen

    def stop_idle_workers(self) -> None:
        """After close(): tell every worker to exit once the queue is empty."""
        for ws in list(self.workers.values()):
            self._maybe_stop(ws)

    # -- from workers ----------------------------------------------------------------------

    @handles(PoolOps.RESULTS)
    def results(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """A batch of results (see _protocol): each task is finished once."""
        ws = self.by_peer.get(peer.peer_id)
        if ws is None:
            return  # a worker already presumed dead: its results were reassigned
        now = time.monotonic()
        heard = Heard()
        self._results(peer, ws, unpack_results(payload), results_busy(payload), now, heard, ws)
        self._tally(heard.fids, heard.items, heard.busy, now)
        if heard.sample < math.inf:  # its own link's round trip (see _credit)
            assert peer.conn is not None
            link = ws.link if ws.link is not None else _credit.Link()
            self.far.observed((ws,), link,
                              _credit.round_trip(heard.sample, tcp_rtt(peer.conn.sock)))
        if self.queue:  # the end of a round has none: a call a result saved
            self.dispatch()
        self._maybe_stop(ws)

    def _results(self, peer: Peer, ws: WorkerState,
                 results: List[Tuple[int, bool, List[Frame]]], busy: float, now: float,
                 heard: Heard, holder: WorkerState) -> None:
        """``ws``'s batch of ``results`` (it ran them for ``busy`` seconds), heard at
        ``now`` on ``peer``, of tasks ``holder``
        held (``ws``, or its job's record: see `_jobs`). Adds to ``heard``
        what the caller counts (`_tally`) and measures (its link's round trip, see
        `_credit`): once a message, for all the workers a job relays. The caller then
        hands out what is queued (`dispatch`: once a message too) and only then stops
        ``ws`` if the pool is done with it (`_maybe_stop`): of two workers idle after one
        message, only the one given nothing is done."""
        fids = heard.fids
        items = 0
        outcome = "done"
        measuring = self.measuring
        waited = self.latency.add
        pending = holder.pending
        for task_id, ok, frames in results:
            task = pending.pop(task_id, None)
            if task is None:
                continue
            task.held_by -= 1
            fids.append(task.fid)
            if task.done:
                continue  # a copy's result came first (see _late): this one is dropped
            items += task.items
            if not ok:
                outcome = "failed"
                if self._raised(task):
                    continue
            if measuring and task.queued:
                if task.items == 1:
                    waited(now - task.queued)
                else:
                    self.latency.observe(now - task.queued, task.items)
            self._finish(task, ok, frames)
        ws.done += items
        self.stream.add(ws.name, ws.since, now, outcome, items)
        ws.since = holder.since = now
        if self.suspects:
            self.suspects.pop(ws.process.host, None)  # its host answers
        if holder is ws:  # (a job's record: refiled once a message, by the caller)
            self._refresh(ws)
        heard.items += items
        heard.busy += busy
        if holder.probe and peer.conn is not None:  # its first results since it was
            # handed tasks idle (over TCP: see hello): a round trip
            heard.sample = min(heard.sample, now - holder.probe - busy)
            holder.probe = 0.0
        if measuring and items:
            if items == 1:
                self.durations.add(busy)
            else:
                self.durations.observe(busy / items, items)
            # each bounded on its own: tasks submitted before measuring began add a
            # duration and no latency
            if len(self.durations.pending) > _status.Histogram.FOLD_AT \
                    or len(self.latency.pending) > _status.Histogram.FOLD_AT:
                self.latency.fold()
                self.durations.fold()

    def _tally(self, fids: List[int], items: int, busy: float, now: float) -> None:
        """Count what one message's results completed (see `_results`): the pool's rate,
        and the running average task length of their functions (the seconds ``busy``
        that their tasks, one a function id in ``fids``, ran as the workers measured)."""
        self.rate.add(items, now)
        if not fids:
            return
        each = busy / len(fids)
        for fid in set(fids):
            old = self.task_seconds.get(fid)
            self.task_seconds[fid] = each if old is None else 0.7 * old + 0.3 * each

    @handles(PoolOps.HELLO, WorkerHello)
    def hello(self, server: Server, peer: Peer, req_id: bytes, msg: WorkerHello) -> None:
        """A worker connected and ran its initializer; it takes tasks."""
        ws = self.workers.get(msg.worker_id)
        if ws is None or ws.lost:
            server.send(peer, [b"", PoolOps.STOP])
            return
        self.by_peer[peer.peer_id] = ws
        self._hello(peer, ws)

    def _hello(self, peer: Peer, ws: WorkerState) -> None:
        ws.peer = peer
        ws.connected = True
        ws.tcp = peer.may_reset  # a link with a round trip to cover (see _credit)
        if self.suspects:
            self.suspects.pop(ws.process.host, None)  # its host answers
        ws.renew_at = _renew.job_renew_at(ws, time.monotonic(), self.lifetime)
        if ws.renew_at:
            self.wake()  # the maintainer sleeps until the next renewal
        self._refresh(ws)
        self.init_failures.started()
        old, ws.replaces = ws.replaces, None
        if old is not None and not (old.lost or old.retiring or ws.retiring):
            # renewed: it retires (not if its replacement retires already: resize()
            # chose it, before its hello, in place of another)
            old.retiring = True
            self.retiring += 1
            said = _renew.said(old, ws)
            if said is not None:
                info("%s", said)
            self._refresh(old)
            self._maybe_stop(old)
        self.dispatch()
        self._maybe_stop(ws)

    @handles(PoolOps.INIT_FAILED, InitFailed)
    def init_failed(self, server: Server, peer: Peer, req_id: bytes, msg: InitFailed) -> None:
        """The worker's initializer raised; it exits once answered. Said here (the first
        of a row with its traceback, the repeats counted: see ``_losses.InitFailures``),
        so its end says nothing more."""
        ws = self.workers.get(msg.worker_id)
        if ws is not None:
            ws.init_failed = True
        self.init_failures.failed(ws, msg.error)
        server.reply(peer, req_id, b"ok")

    @handles(PoolOps.RETIRING, Retiring)
    def retiring_worker(self, server: Server, peer: Peer, req_id: bytes,
                        msg: Retiring) -> None:
        """The worker's cluster told it to go (see `_retire`). Answered ``die`` when fiber
        itself is ending it (``terminate()``, the program's exit), else ``retire``: the
        tasks it holds but those it took go back to the queue, charged to no one, and it
        is replaced now."""
        ws = self.workers.get(msg.worker_id)
        if ws is None or ws.lost or ws.process.cancelled:
            server.reply(peer, req_id, b"die")
            return
        given = self._take_back(ws, msg.taken)
        ws.retired_why = _retire.why(msg.signum)
        if ws.job is not None:
            ws.job.alive = False  # its cluster is ending the job: nothing is forked in it
        if not ws.retiring:
            ws.retiring = True
            self.retiring += 1
            self._free_slot(ws)
        info("%s (%s) retires: %s; %s", ws.name, _losses.where(ws), ws.retired_why,
             _retire.plan(ws, given))
        server.reply(peer, req_id, b"retire")
        self._refresh(ws)
        self._maybe_stop(ws)
        self.on_worker_gone(ws, True)  # wakes the pool's maintainer: a replacement
        self.dispatch()

    def _take_back(self, ws: WorkerState, kept: Iterable[int]) -> List[Task]:
        """The tasks ``ws`` holds but those of ``kept`` (their ids) go back to the front
        of the queue, in their order; returned."""
        ids = set(kept)
        back = [task for task_id, task in ws.pending.items() if task_id not in ids]
        for task in back:
            del ws.pending[task.task_id]
        return self._requeue(back)

    def _requeue(self, tasks: List[Task]) -> List[Task]:
        """Tasks a worker held go back to the front of the queue, in their order, but
        those done or whose copy another worker holds (see `_late`); returned."""
        for task in tasks:
            task.held_by -= 1
        back = [task for task in tasks if not task.done and task.held_by <= 0]
        self.queue.extendleft(reversed(back))
        self.queued_items += sum(task.items for task in back)
        return back

    def peer_gone(self, server: Server, peer: Peer) -> None:
        """A worker's connection ended: it is lost, unless the connection was reset while
        the worker may still live (see `_resume`): then it is waited for, holding its
        tasks, until it connects again, its job ends, or the wait is over.

        A job's connection that relayed its workers (see `_group`): they are waited for
        the same way if it was reset, else lost, all, and not replaced in it (see
        `relay_gone`)."""
        self.relay_gone(server, peer)
        ws = self.by_peer.pop(peer.peer_id, None)
        if ws is None:
            return
        self._count_traffic(peer)
        if not self._may_resume(peer, ws):
            self.worker_lost(ws)
            return
        self._await_resume(server, ws)
        log("%s's connection was reset: waiting %.0f s for it to connect again",
            ws.name, _resume.RESUME_WAIT_S)

    def far_room(self) -> int:
        """The tasks the workers on slow links may hold of the function submitted last:
        what an ``imap`` keeps submitted ahead to fill them (see `_credit`)."""
        return self.far.room(self.task_seconds.get(self.last_fid), self.prefetch)

    # -- bookkeeping -------------------------------------------------------------------

    def _finish(self, task: Task, ok: bool, frames: Sequence[Frame]) -> None:
        if task.done:
            return
        task.done = True
        self.outstanding -= 1
        if ok:
            self.done += task.items
        else:
            self.failed += task.items
        task.frames = ()
        self.function_refs[task.fid] -= 1
        if self.function_refs[task.fid] <= 0:
            self.release_function(task.fid)
        task.job.deliver(task.index, ok, frames)

    def _raised(self, task: Task) -> bool:
        """Whether ``task``, which raised, goes back to the queue to run again (on any
        worker): with ``retry_raised``, ``max_retries`` times; after that its exception
        is its result. A copy that raised while another holder still runs the task (see
        `_late`) leaves it to that run, which is its run again: neither queued (held
        twice at once, it could be handed to that holder again, and then lost without a
        result) nor charged a retry."""
        if not self.retry_raised or task.raised >= self.max_retries:
            return False
        if task.held_by > 0:
            return True
        task.raised += 1
        self.queue.append(task)
        self.queued_items += task.items
        self.retried += task.items
        log("%s raised; run again (%d of pool_max_task_retries=%d)", task.label,
            task.raised, self.max_retries)
        return True

    def _maybe_stop(self, ws: WorkerState) -> None:
        """Stop ``ws`` if the pool is done with it: it retires and holds nothing (a
        worker whose job holds its tasks: at once, its job hands it no more), or the pool
        is closing and nothing is queued nor held (by it, or by its job)."""
        if not ws.connected or ws.lost or ws.pending:
            return
        if ws.holder is not ws and not ws.retiring and ws.holder.pending:
            return
        if ws.retiring or (self.closing and not self.queue):
            if self.server is not None and ws.peer is not None:
                self._push(ws, [b"", PoolOps.STOP])
                ws.stopped = True  # (it exits: a task requeued later waits for another)
                self._refresh(ws)

    def traffic(self) -> Tuple[int, int]:
        """Bytes sent to the pool's workers and received from them, on their connections
        (tasks, functions and arguments; results; the workers' calls and their answers),
        counted by the transport as it writes and reads: nothing on the pool's path."""
        holders = list(self.by_peer.values()) + [
            next(iter(relayed.values())) for relayed in self.relays.values() if relayed]
        sent, received = Server.traffic([ws.peer for ws in holders if ws.peer is not None])
        return sent + self.traffic_gone[0], received + self.traffic_gone[1]

    def _count_traffic(self, peer: Peer) -> None:
        """``peer`` is no worker's any more: its bytes go to `traffic_gone`."""
        out, got = Server.traffic((peer,))
        self.traffic_gone[0] += out
        self.traffic_gone[1] += got

    def worker_lost(self, ws: WorkerState) -> None:
        """A worker's connection closed or its job ended: reassign what it held, and
        warn (once its exit code is known, see `_losses`) unless it ended as
        asked."""
        if ws.whole:  # a job's record: its job is lost
            self._drop_holder(ws)
            return
        if ws.lost:
            return
        ws.lost = True
        self._refresh(ws)
        if ws.peer is not None and self.by_peer.pop(ws.peer.peer_id, None) is not None:
            self._count_traffic(ws.peer)
        if ws.relayed and ws.peer is not None:
            self.relays.get(ws.peer.peer_id, {}).pop(ws.worker_id, None)
        if self.workers.pop(ws.worker_id, None) is not None and ws.retiring:
            self.retiring -= 1
        self.far.forget(ws)
        now = time.monotonic()
        if ws.process.host and _late.silent(ws, self.task_seconds, self.late_factor, now):
            self.suspects[ws.process.host] = now + _late.SUSPECT_S
        tasks = list(ws.pending.values())
        ws.pending.clear()
        expected = bool(ws.retired_why) or (not tasks and (ws.retiring or self.closing or (
            self.maxtasks is not None and ws.assigned >= self.maxtasks)))
        notes, tasks = self._give_back(ws, tasks, now)
        if not ws.retiring:
            self._free_slot(ws)
        # Its job (of several) says how it ended, and replaces it: until then it counts.
        awaited = (ws.job is not None and ws.job.forks and ws.job.alive
                   and ws.exitcode is None)
        if awaited:
            self.awaiting[ws.worker_id] = (ws, expected)
        if ws.retired_why:
            log("%s left the pool (retired: %s)%s", ws.name, ws.retired_why,
                f"; {_losses.tasks_text(tasks)} run again" if tasks else "")
        elif expected or ws.process.cancelled:
            log("%s left the pool (%s)", ws.name,
                "retired" if ws.retiring else "terminated" if ws.process.cancelled
                else "pool closing" if self.closing else "maxtasksperchild reached")
        elif ws.init_failed:  # said when it told (init_failed)
            log("%s ended: its initializer raised", ws.name)
        else:
            log("%s lost, holding %d tasks", ws.name, len(tasks))
            held = _losses.given_of(tasks) if ws.job is not None and ws.job.forks else []
            self.losses.add(ws, _losses.Loss(_losses.tasks_text(tasks), notes, ws.started,
                                             _losses.given_text(ws.given, tasks), held))
            if exit_code(ws) is not None and not (ws.job is not None and ws.job.forks):
                # (a job of several says how its worker ended, or the job did: _settle)
                self.losses.ready(ws)
            elif self.server is not None:
                self.server.call_later(_losses.REPORT_WAIT_S, lambda: self.wait_over(ws))
        if not awaited:
            self.on_worker_gone(ws, expected)
        self.dispatch()

    def _give_back(self, ws: WorkerState, tasks: List[Task],
                   now: float) -> Tuple[List[str], List[Task]]:
        """Lost worker ``ws`` held ``tasks``: each is charged to it (not if its cluster
        retired it: its grace ran out mid-task), goes back to the queue (but those done,
        or whose copy runs elsewhere) and counts in ``retried``, once for this loss.
        Returns the notes of its warning and the tasks queued again."""
        notes = [] if ws.retired_why else self._charge(ws, tasks)
        back = self._requeue(tasks)
        items = sum(task.items for task in back)
        if items:
            self.stream.add(ws.name, ws.since, now, "lost", items)
        if not ws.retired_why:
            self.retried += items
        return notes, back

    def _charge(self, ws: WorkerState, tasks: List[Task]) -> List[str]:
        """Count worker ``ws``'s death against the ``tasks`` it held (see
        `_losses.charge`); a task that has now killed its worker too often fails."""
        notes, culprit = _losses.charge(ws, tasks, self.max_retries)
        if culprit is not None:
            self.giving_up[culprit.task_id] = culprit
            self._give_up(culprit, time.monotonic() + _losses.REPORT_WAIT_S)
        return notes

    def _give_up(self, task: Task, deadline: float) -> None:
        """Fail a task that killed its worker too often, naming each attempt's exit code
        or signal. A worker's connection closes before its backend reports the job's
        end (a pod's, seconds later), so this waits for those reports until
        ``deadline``, on the hub's timers (it holds the hub's lock: no blocking here)."""
        if task.done:
            self.giving_up.pop(task.task_id, None)
            return
        if (self.server is not None and time.monotonic() < deadline
                and any(exit_code(ws) is None for ws in task.attempts)):
            self.server.call_later(_EXIT_POLL, lambda: self._give_up(task, deadline))
            return
        del self.giving_up[task.task_id]
        self._finish(task, False, dumps(pack_local_exception(
            _losses.lost_error(task, self.max_retries))))
        self.wake()  # (a closed pool's maintainer waits for it: see PoolCore._maintain)
