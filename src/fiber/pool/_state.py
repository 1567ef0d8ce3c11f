"""The master's records of a pool: its tasks, its workers, and which can take a task.

A `Task` is one unit handed to a worker (an ``apply``'s call, or a chunk of a map's
items); a `WorkerState` is what the master knows of one worker (what it holds, its
state, its place in the pool); `ReadyWorkers` finds the least-loaded worker that can
take a task in O(1). `PoolService` (`_service`) keeps them, under the hub's lock.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, List, Optional, Protocol, Sequence, Tuple

from ..process import Process
from ..transport.serialization import Frame
from ..transport.server import Peer
from . import _credit

__all__ = ["ResultSink", "Task", "WorkerState", "PoolJob", "ReadyWorkers", "Loss", "Given"]


class ResultSink(Protocol):
    """Where a task's result goes: the result object of its call (an ``ApplyResult``,
    a ``MapResult``, an ``imap`` iterator, an executor's future)."""

    def deliver(self, index: int, ok: bool, frames: Sequence[Frame]) -> None:
        """The outcome of item ``index``: a value's frames, or an exception record's."""


class Loss:
    """A lost worker's warning, waiting for its exit code."""

    __slots__ = ("tasks", "notes", "connected", "ready", "given", "held")

    def __init__(self, tasks: str, notes: List[str], connected: bool,
                 given: str = "", held: Sequence[Given] = ()) -> None:
        self.tasks = tasks
        #: The tasks it held, as `Given` records (a worker of a job of several: its job's
        #: warning names all its workers' tasks together).
        self.held = held
        self.notes = notes
        self.connected = connected
        self.ready = False  # to be said: its exit code is known, or waited for long enough
        self.given = given  # `given_text`: tasks lost in flight at an earlier reset


class Given:
    """A task a worker gave back when it came back after a reset (lost in flight, run
    again): its id, call and items' places, not the task (which holds its call's
    results)."""

    __slots__ = ("task_id", "call", "first", "items")

    def __init__(self, task_id: int, call: str, first: int, items: int) -> None:
        self.task_id = task_id
        self.call = call
        self.first = first
        self.items = items


class Task:
    """One unit of work handed to a worker: an ``apply``'s call, or a chunk of a map's
    items. What users read (``Pool.status()``, ``fiber top``, errors) counts and names
    the items, a map's item being one task whatever its chunksize (``items``, ``first``)."""

    __slots__ = ("task_id", "job", "index", "fid", "frames", "attempts", "done", "call",
                 "suspect", "first", "items", "queued", "raised", "held_by")

    def __init__(self, task_id: int, job: ResultSink, index: int, fid: int,
                 frames: Sequence[Frame], call: str, first: Optional[int] = None,
                 items: int = 1) -> None:
        self.task_id = task_id
        self.job = job
        self.index = index  # of the chunk, as the call's result sink counts them
        self.first = index if first is None else first  # the first item's, in the call
        self.items = items  # the items of the chunk (1: an apply's call)
        self.fid = fid
        self.frames = frames
        #: The worker states that died holding this task (a tuple: most tasks have none).
        self.attempts: Tuple[Any, ...] = ()
        self.done = False
        self.call = call  # what was called, as "map(fn)": shared by the tasks of a call
        #: Held by a worker that died holding several tasks: it may be the one that killed
        #: it, so it runs alone on a worker until it completes (see worker_lost).
        self.suspect = False
        self.queued = 0.0  # when it was submitted (monotonic; see PoolService.submit)
        #: Times it raised and was run again (a pool with ``error_handling=True``).
        self.raised = 0
        #: Workers holding it: 1 once handed out, 2 while a copy of it runs elsewhere
        #: because it was late (see `_late`).
        self.held_by = 0

    @property
    def label(self) -> str:
        """The task as error messages and ``fiber top`` name it, by its items' places in
        the call: ``map(f) (task 7)``, or for a chunk ``map(f) (tasks 28-31)`` (made when
        needed: not once per task)."""
        if self.items == 1:
            return f"{self.call} (task {self.first})"
        return f"{self.call} (tasks {self.first}-{self.first + self.items - 1})"


class PoolJob:
    """A job of the pool's: one worker, or several (``forks``: ``workers_per_job`` > 1,
    see `_group`), which its process forks, and replaces when the pool asks it to."""

    __slots__ = ("process", "forks", "workers", "alive", "renew_at", "renewed", "link",
                 "holder")

    def __init__(self, process: Process, forks: bool) -> None:
        self.process = process
        self.forks = forks
        #: Its workers, in the order they joined it (those lost included).
        self.workers: List[WorkerState] = []
        #: False once its process has ended, its connection has, or its cluster told it
        #: to go: no worker is replaced in it any more.
        self.alive = True
        #: A job of several: when its workers are renewed, together (monotonic; 0: not
        #: known yet, or never; see `_renew`), and whether a job took its place.
        self.renew_at = 0.0
        self.renewed = False
        #: A job of several: the round trip of its connection, which its workers share
        #: (see `_credit.FarWorkers`), measured once a message (``from_workers``).
        self.link: Optional[_credit.Link] = None
        #: A job of several handed tasks as a whole (see `_jobs`): its record of the
        #: tasks it holds, made at its first worker's hello; None: its workers are each
        #: handed theirs.
        self.holder: Optional[WorkerState] = None


class WorkerState:
    __slots__ = ("worker_id", "process", "name", "job", "peer", "pending", "functions",
                 "assigned", "retiring", "lost", "connected", "exitcode", "load",
                 "loss", "since", "done", "slot", "restarts", "init_failed", "retired_why",
                 "renew_at", "replaces", "resume_by", "given", "probe", "link", "tcp",
                 "relayed", "holder", "width", "whole", "credit", "inherited", "ended_with",
                 "stopped")

    def __init__(self, worker_id: int, process: Process, name: Optional[str] = None,
                 job: Optional[PoolJob] = None) -> None:
        self.worker_id = worker_id
        #: Its job: its own, or the job of several workers it is one of (``job``).
        self.process = process
        self.name = name if name is not None else process.name  # "PoolWorker-7"
        self.job = job
        if job is not None:
            job.workers.append(self)
        self.peer: Optional[Peer] = None
        #: The tasks it holds, oldest first (a dict: `collections.OrderedDict` costs
        #: several times more to fill and empty, once a task on the hot path).
        self.pending: Dict[int, Task] = {}
        #: This worker's function LRU, as the worker keeps it (see _pool_protocol): a
        #: dict of ints, which the garbage collector does not track (an OrderedDict is
        #: tracked: 10,000 workers' made its every full pass a quarter longer).
        self.functions: Dict[int, None] = {}
        self.assigned = 0
        self.retiring = False
        self.lost = False
        self.connected = False
        self.exitcode: Optional[int] = None
        #: Its bucket in `ReadyWorkers` (the tasks it held when put there), or -1:
        #: it cannot take a task now.
        self.load = -1
        #: Its warning once lost, until said (see `_losses`).
        self.loss: Optional[Loss] = None
        #: When the task it runs started, as far as the master can tell (monotonic): when
        #: it was handed to the idle worker, or the worker's last results came.
        self.since = 0.0
        self.done = 0  # tasks (items) it completed
        #: Its place in the pool (a worker replacing a lost one takes its place) and how
        #: often that place's worker was replaced.
        self.slot = 0
        self.restarts = 0
        self.init_failed = False  # its initializer raised (it said so: see init_failed)
        #: Why its cluster told it to go (see _retire), or "": a retirement, not a loss.
        self.retired_why = ""
        #: When it is renewed (monotonic; 0: never; ``_renew.RENEWED``: its place went
        #: to another already), and the worker it renews (see _renew).
        self.renew_at = 0.0
        self.replaces: Optional[WorkerState] = None
        #: Its connection was reset: when it is lost unless it has connected again
        #: (monotonic; 0: it is not being waited for. See `_resume`).
        self.resume_by = 0.0
        #: The tasks it gave back when it came back after a reset: its warning, if it is
        #: lost later, names them (see `_losses`).
        self.given: Tuple[Given, ...] = ()  # (a tuple: an empty list is tracked)
        #: When it was handed tasks while it held none, until its next results (its link's
        #: round trip is measured so: see `_credit`); 0: not since its last results.
        self.probe = 0.0
        #: Its link's measured round trip, once measured (over TCP only).
        self.link: Optional[_credit.Link] = None
        #: Its connection is TCP: its link's round trip is measured (see `_credit`).
        self.tcp = False
        #: Its messages come and go through its job's connection (``peer``), each with
        #: its id (a job of several: see `_group`).
        self.relayed = False
        #: What holds the tasks it runs: itself, or its job's record (a job handed tasks
        #: as a whole, see `_jobs`), which then keeps ``pending`` for all its workers.
        self.holder = self
        #: A job's record (``whole``): it takes tasks for ``width`` workers (its live
        #: ones; their credit each). A worker: 1.
        self.width = 1
        self.whole = False
        self.credit = 0  # a job's record: the credit a worker it last told its job
        #: The ids of the tasks its job's record left it when given up (its heir, see
        #: `_drop_holder`), until its job comes back (`resume_job`).
        self.inherited: FrozenSet[int] = frozenset()
        #: The ids of the tasks its job said it ended holding (see `_handed_back`): a
        #: job that asks `resume_job` again says them again, and they are its once.
        self.ended_with: FrozenSet[int] = frozenset()
        #: Told to exit (`_maybe_stop`): it takes nothing more, not even a late copy.
        self.stopped = False

    @property
    def started(self) -> bool:
        """Whether it connected and said hello: it is connected, or waited for since its
        connection was reset (a crashed node's workers often end so: their kernel's
        reset, then their job's end). A worker lost so "was lost"; it did not "end
        before it connected", nor count as a failed start."""
        return self.connected or self.resume_by > 0


class ReadyWorkers:
    """The workers that can take a task, bucketed by how many tasks they hold.

    The least-loaded one is found in O(1) (amortized over the buckets, at most the
    largest credit), so that handing out a task or hearing a result costs the same with
    1,024 workers as with 4: no scan of every worker per message.

    Within a bucket the worker put there last comes first. One task at a time (``apply``
    in a loop: an RL step, an ``AsyncManager`` call) then goes back to the worker that
    returned the previous one, which is still polling for its next task (see the
    worker's ``SpinPays``) on a warm CPU. First come first served would rotate it over
    every idle worker, each idle for ``n - 1`` round trips by then: asleep, to be woken,
    and polling no more since its waits are long (twice the round trip on 2 CPUs).
    """

    def __init__(self) -> None:
        self._buckets: List[Dict[WorkerState, None]] = []

    def put(self, ws: WorkerState, ready: bool) -> None:
        """File ``ws`` under its current load if ``ready``, else take it out."""
        if ws.load >= 0:
            del self._buckets[ws.load][ws]
            ws.load = -1
        if ready:
            load = len(ws.pending) // ws.width  # (a job's record: its tasks a worker)
            while len(self._buckets) <= load:
                self._buckets.append({})
            self._buckets[load][ws] = None
            ws.load = load

    def idle(self) -> List[WorkerState]:
        """The workers that hold no task and can take one, the last become so first."""
        return list(reversed(self._buckets[0])) if self._buckets else []

    def take(self) -> Optional[WorkerState]:
        """Take a worker holding the fewest tasks out (of those, the one that became so
        last): the caller hands it a task and files it again (`put`), or puts it back
        as it was (``put(ws, True)``: the end of its bucket, where it was)."""
        for bucket in self._buckets:
            if bucket:
                # `popitem`, not a peek with ``next(reversed(bucket))``: a dict keeps the
                # holes its deletions leave at its end, which a reversed iterator skips
                # one by one and `popitem` drops. Handing out a round of tasks takes
                # from the end of the idle bucket, one worker a task: the peek made that
                # round quadratic (15 ms at 10,000 workers, 60 at 20,000)
                ws = bucket.popitem()[0]
                ws.load = -1
                return ws
        return None
