"""``Pool.status()``: a snapshot of a pool's workers and tasks, for people (``fiber top``).

Everything here is read from the scheduler's state (`_service`) under the hub's lock,
in one pass over the workers: a pool of 1,000 workers answers in a millisecond or two,
and nothing is counted per task but four integers and a per-second bucket. Counts are
of items: the scheduler hands out chunks of a map's items, users count their items.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import functools
import time
from typing import Any, Deque, Dict, Iterable, List, Optional, Set, Tuple

from ._state import WorkerState

__all__ = ["Rate", "Stream", "Histogram", "WorkerStatus", "PoolStatus",
           "rows", "status_dict", "snapshot", "new_tally", "tally"]

#: Seconds over which ``tasks_per_s`` is measured.
RATE_WINDOW_S = 10


class Rate:
    """Tasks completed per second over the last ``RATE_WINDOW_S`` seconds."""

    __slots__ = ("_buckets", "_started")

    def __init__(self) -> None:
        self._buckets: Deque[Tuple[int, int]] = collections.deque()  # (second, count)
        self._started = time.monotonic()

    def add(self, count: int, now: float) -> None:
        second = int(now)
        buckets = self._buckets
        if buckets and buckets[-1][0] == second:
            buckets[-1] = (second, buckets[-1][1] + count)
        else:
            buckets.append((second, count))
            while buckets and buckets[0][0] <= second - RATE_WINDOW_S:
                buckets.popleft()

    def per_second(self, now: float) -> float:
        """The rate over the window (or since the pool started, if that is shorter)."""
        first = now - RATE_WINDOW_S
        total = sum(count for second, count in self._buckets if second > first)
        span = min(float(RATE_WINDOW_S), max(now - self._started, 1e-3))
        return total / span


class Stream:
    """A pool's task stream, for the dashboard's timeline: one bar per batch of results
    a worker returned (from when it began on them, as far as the master can tell, to
    when they came), or per batch a lost worker gave back. Bounded; a deque append per
    results message is all it costs the pool."""

    __slots__ = ("bars",)

    #: Bars kept, and the age (s) past which they are not shown.
    KEPT = 2000
    WINDOW_S = 60.0

    def __init__(self) -> None:
        #: (worker name, start, end (monotonic), outcome, tasks)
        self.bars: Deque[Tuple[str, float, float, str, int]] = collections.deque(
            maxlen=self.KEPT)

    def add(self, worker: str, start: float, end: float, outcome: str, tasks: int) -> None:
        """``outcome``: ``done``, ``failed`` (some task of the batch raised) or ``lost``
        (given back to the queue)."""
        self.bars.append((worker, start, end, outcome, tasks))

    def recent(self, now: float, bars: List[Tuple[str, float, float, str, int]],
               workers: Optional[Set[str]] = None) -> List[List[Any]]:
        """Of ``bars`` (a copy of `bars`, taken under the hub's lock: this runs outside
        it), those that ended within `WINDOW_S`, of ``workers`` only if given (a page
        of the dashboard's table: its rows) and of workers lost since: ``[worker, start
        age (ms), end age (ms), outcome, tasks]``, oldest first. Ages are whole
        milliseconds: ``int`` costs a seventh of ``round(x, 3)``, and a 1,024-worker pool
        keeps all 2,000 bars."""
        oldest = now - self.WINDOW_S
        return [[w, int((now - a) * 1000), int((now - b) * 1000), o, n]
                for w, a, b, o, n in bars
                if b >= oldest and (workers is None or w in workers or o == "lost")]


class Histogram:
    """Counts of observed seconds by bucket, as Prometheus histograms have them (each
    bucket counts the observations up to its bound; ``sum`` and ``count`` of all).

    The hub's thread observes each task's latency: `add` only appends the value to
    `pending` (a list's bound ``append``: 40 ns, where a bisect and three additions cost
    the hub 350 ns a task), and the values are binned in bulk, by C loops, when the
    histogram is read or `FOLD_AT` of them wait."""

    __slots__ = ("counts", "sum", "count", "pending", "add")

    #: Values kept unbinned at most (a few hundred KB).
    FOLD_AT = 16384

    #: Upper bounds (s) of the buckets: a 1 ms RL step to a minutes-long simulation.
    BOUNDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
              2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BOUNDS) + 1)  # the last: above every bound
        self.sum = 0.0
        self.count = 0
        self.pending: List[float] = []  # observed once each, not binned yet
        #: One observation of a value, binned later (see the class).
        self.add = self.pending.append

    def observe(self, seconds: float, n: int = 1) -> None:
        """``n`` observations of ``seconds`` each."""
        self.counts[bisect.bisect_left(self.BOUNDS, seconds)] += n
        self.sum += seconds * n
        self.count += n

    def take(self) -> List[float]:
        """The `pending` values, handed over (under the lock that guards `add`), to bin
        with `binned` outside it: a second's latencies of a Pool(1024) running 1 ms
        tasks (~9,000) take the hub's lock 1-2 ms to bin, 20 us to take."""
        taken = self.pending[:]  # a copy: `add` is bound to this list
        self.pending.clear()
        return taken

    @classmethod
    def binned(cls, values: List[float]) -> Tuple[Dict[int, int], float]:
        """``values`` by bucket (index -> count), and their sum: for `merge`."""
        bins = collections.Counter(map(functools.partial(bisect.bisect_left, cls.BOUNDS),
                                       values))
        return bins, sum(values)

    def merge(self, binned: Tuple[Dict[int, int], float]) -> None:
        """Add values `binned` (under the lock that guards `add`)."""
        bins, total = binned
        for index, n in bins.items():
            self.counts[index] += n
            self.count += n
        self.sum += total

    def fold(self) -> None:
        """Bin the `pending` values (under the lock that guards `add`)."""
        if self.pending:
            self.merge(self.binned(self.take()))

    def as_dict(self) -> Dict[str, Any]:
        """``{"buckets": [[bound, cumulative count]...], "sum", "count"}``, the last
        bound ``"+Inf"`` (what /metrics prints)."""
        self.fold()
        total = 0
        buckets: List[List[Any]] = []
        for bound, n in zip((*self.BOUNDS, "+Inf"), self.counts):
            total += n
            buckets.append([bound, total])
        return {"buckets": buckets, "sum": self.sum, "count": self.count}


@dataclasses.dataclass(frozen=True)
class WorkerStatus:
    """One worker of a pool, as ``Pool.status()`` shows it.

    ``state`` is ``starting`` (its job was submitted, it has not connected yet), ``idle``,
    ``running``, ``retiring`` (``resize`` or ``close``: it finishes what it holds) or
    ``reconnecting`` (its connection was reset: it is waited for, holding its tasks).
    ``task`` names what it runs: the call and the task's index in it (``map(f) (task
    7)``), the indexes of the chunk of items it was handed (``map(f) (tasks 28-31)``,
    with ``chunksize=4``), or an apply's place among the pool's applies (``apply(f)
    (task 3)``); and ``running_s`` for how long, as far as the master can tell (since it
    was handed to the idle worker, or since the worker's last results).
    ``held`` and ``done`` count tasks (items, as everywhere here): those it holds (the
    one it runs and those prefetched) and those it completed. ``restarts``: how many
    workers held this worker's place in the pool before it (each replaced one that was
    lost).
    """

    name: str
    job_id: str
    host: str
    state: str
    task: Optional[str]
    running_s: Optional[float]
    held: int
    done: int
    restarts: int


@dataclasses.dataclass(frozen=True)
class PoolStatus:
    """A pool at one moment (``Pool.status()``).

    Counts are of tasks, a map's item being one task whatever the ``chunksize`` (a
    ``map`` of 30 items is 30 tasks, not its 8 chunks): ``pending`` (queued, no worker
    holds them), ``running`` (held by workers: the one each runs and those it
    prefetched), ``done`` (returned a value), ``failed`` (raised, or failed because
    their worker was lost too often, or the pool was terminated), ``retried`` (given
    back to the queue by a lost worker, each time), ``tasks_per_s`` (completed, over
    the last 10 s). ``size`` is the number of workers the pool keeps.
    """

    state: str
    size: int
    workers: List[WorkerStatus]
    pending: int
    running: int
    done: int
    failed: int
    retried: int
    tasks_per_s: float

    def as_dict(self) -> Dict[str, Any]:
        """The snapshot as plain dicts and lists (what ``fiber top`` and the dashboard
        receive). Not ``dataclasses.asdict``, whose deep copies of values that are all
        immutable made a poll of a 64-worker pool cost 23 ms, not 2."""
        out = dict(self.__dict__)
        out["workers"] = [dict(w.__dict__) for w in self.workers]
        return out


def _state(ws: WorkerState) -> str:
    """A worker's `WorkerStatus.state` (under the hub's lock)."""
    if ws.retiring:
        return "retiring"
    if ws.pending or (ws.holder is not ws and ws.holder.pending and ws.connected):
        # (a worker whose job holds its tasks: running while its job holds any)
        return "reconnecting" if ws.resume_by else "running"
    return "idle" if ws.connected else "reconnecting" if ws.resume_by else "starting"


def _row(ws: WorkerState, now: float) -> Dict[str, Any]:
    """One worker as `WorkerStatus`'s fields, a plain dict (what the dashboard and ``fiber
    top`` receive: a frozen dataclass and its copy cost 10 ms a poll at 1,024 workers)."""
    proc = ws.process
    pending = ws.pending
    if pending:
        label: Optional[str] = next(iter(pending.values())).label
        running: Optional[float] = max(0.0, now - ws.since)
        held = sum(t.items for t in pending.values())
    else:
        label = running = None
        held = 0
    return {"name": ws.name, "job_id": proc.job_id, "host": proc.host, "state": _state(ws),
            "task": label, "running_s": running, "held": held, "done": ws.done,
            "restarts": ws.restarts}


def rows(states: Iterable[WorkerState], now: float) -> List[Dict[str, Any]]:
    """The rows of the workers ``states`` (the scheduler's) that are not lost (under the
    hub's lock)."""
    return [_row(ws, now) for ws in states if not ws.lost]


def new_tally() -> Dict[str, Any]:
    """What a pool's every worker adds up to, without a row each (see `tally`)."""
    return {"workers_total": 0, "worker_states": {}, "restarts": 0, "running": 0}


def tally(states: Iterable[WorkerState], into: Dict[str, Any]) -> None:
    """Add the workers ``states`` that are not lost to ``into`` (a `new_tally`, under the
    hub's lock): their count, their counts by state, their restarts and the tasks they
    hold. What /metrics and a page of the worker table need of every worker: a row each
    cost a 1,024-worker pool 10-20 ms of its hub's time a poll, and a loop that added
    each worker's figures one by one 0.9 ms at rest; comprehensions and C loops 0.35."""
    live = [ws for ws in states if not ws.lost]
    into["workers_total"] += len(live)
    by_state = into["worker_states"]
    for state, n in collections.Counter(map(_state, live)).items():
        by_state[state] = by_state.get(state, 0) + n
    into["restarts"] += sum([ws.restarts for ws in live])
    into["running"] += sum([t.items for ws in live if ws.pending for t in ws.pending.values()])


def status_dict(service: Any, state: str, size: int,
                workers: Optional[List[Dict[str, Any]]] = None,
                running: Optional[int] = None) -> Dict[str, Any]:
    """`PoolStatus.as_dict` of the pool whose scheduler is ``service`` (under the hub's
    lock), made directly; ``workers``: their `rows`, if made already (``running``: the
    tasks every worker holds, if ``workers`` are some of them). The workers come in the
    order they were started, which is their names' (``PoolWorker-N``, numbered as
    started: the scheduler keeps them so)."""
    now = time.monotonic()
    if workers is None:
        workers = rows(service.workers.values(), now)
    if running is None:
        running = sum(w["held"] for w in workers)
    # the tasks of jobs that hold them as a whole (see fiber.pool._jobs), not their workers
    running += sum([t.items for h in getattr(service, "holders", {}).values()
                    if not h.lost
                    for t in h.pending.values()])
    return {"state": state.lower(), "size": size, "workers": workers,
            "pending": service.queued_items, "running": running,
            "done": service.done, "failed": service.failed, "retried": service.retried,
            "tasks_per_s": round(service.rate.per_second(now), 1)}


def snapshot(service: Any, state: str, size: int) -> PoolStatus:
    """The status of the pool whose scheduler is ``service`` (under the hub's lock)."""
    out = status_dict(service, state, size)
    out["workers"] = [WorkerStatus(**w) for w in out["workers"]]
    return PoolStatus(**out)
