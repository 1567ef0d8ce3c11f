"""The core of a ``fiber.Pool``: its workers' life cycle and the submission of tasks.

    Pool (the API, `_pool`) ── submit(fn, mode, items) ──▶ PoolCore
        └─ pickles the function once (a table of functions per pool), the arguments per
           task, and hands the tasks to PoolService (`_service`, on the hub)
    maintainer thread (one per pool): starts workers (one backend submit for many),
        watches their sentinels, replaces the lost, stops the pool when it is done

A pool object that is collected is terminated (`terminate_collected`).
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import secrets
import selectors
import signal
import sys
import threading
import time
import traceback
import types
import warnings
import weakref
from typing import (
    Any,
    Callable,
    Dict,
    FrozenSet,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
)

from .._core import _runtime
from .._core._served import probing
from .._core._shared import Shared, share_if_large
from .._log import log
from .._preload import preload_modules
from ..backends import Resources
from ..config import get_config
from ..errors import BrokenPoolError, PoolTerminatedError
from ..process import Process, end_with_parent, start_all, terminate_all
from ..process._job import end_said_elsewhere
from ..process._launcher import launcher
from ..process._limits import ensure_open_files
from ..process._process import (
    exitcode_of,
    keep_sentinel,
    mark_tagged_output,
    program_exiting,
    release_ended,
    set_placement,
    set_resources,
)
from ..process._starting import backend_of, files_per_job
from ..transport.remote import pack_local_exception
from ..transport.serialization import dumps
from ..transport.serving import Serving, held_here
from ..transport.unpicklable import explain, explained
from . import _draining, _renew
from ._group import group_main
from ._results import (
    CallbackThread,
)
from ._service import PoolService, describe_exit
from ._state import PoolJob, ResultSink, Task, WorkerState
from ._worker import CALL, worker_main

__all__ = ["PoolCore", "terminate_collected", "label", "check_size", "RUN", "CLOSE",
           "TERMINATE"]


RUN, CLOSE, TERMINATE = "RUN", "CLOSE", "TERMINATE"
_MAX_STARTUP_FAILURES = 3
_FUNCTION_CACHE = 256
#: Tasks queued at a time (see PoolCore.submit); the first slice of a map is smaller if
#: the pool's window is. It was the whole window: a pool of 10,000 workers started no
#: task before it had pickled 10,000, and a round of 1 s tasks ended 40 ms later.
_SLICE = 256
_OUTPUT_WAIT_S = 2.0  # seconds join waits for the last output of workers that ended


def label(fn: object) -> str:
    if isinstance(fn, functools.partial):
        return label(fn.func)
    return getattr(fn, "__qualname__", None) or repr(fn)


def _explain_task(error: BaseException, mode: int, data: Sequence[object], index: int,
                  label: str) -> BaseException:
    """A task's pickling error, saying which argument or item and which object failed."""
    if mode == CALL:
        args, kwargs = data
        if explain(args, "args") is not None:
            return explained(error, f"an argument of {label}", args, "args")
        return explained(error, f"an argument of {label}", kwargs, "kwargs")
    return explained(error, f"chunk {index} of {label}", data, "items")


def check_size(processes: object) -> None:
    """Raise as multiprocessing does for a pool size that is not a positive int."""
    if not isinstance(processes, int) or isinstance(processes, bool):
        raise TypeError(f"the number of processes must be an int, not "
                        f"{type(processes).__name__!r}")
    if processes < 1:
        raise ValueError("Number of processes must be at least 1")


def _self_inflicted(exitcode: Optional[int]) -> bool:
    """Whether a worker that died before connecting failed by itself (an exception, a
    crash) rather than being killed from outside (SIGKILL, SIGTERM: an operator, the OOM
    killer, a preempted node); only the former counts towards a broken pool."""
    if exitcode is None:
        return False
    return exitcode >= 0 or -exitcode not in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)


class PoolCore:
    """The pool's state; referenced by its threads, never by the user's Pool object, so
    that a pool dropped by its user is garbage-collected and its workers ended."""

    def __init__(self, size: int, process_class: Type[Process],
                 initializer: Optional[Callable[..., object]],
                 initargs: Tuple[object, ...], maxtasks: Optional[int],
                 resources: Resources, workers_per_job: int = 1) -> None:
        cfg = get_config()
        #: Workers a job holds (see `_group`): 1, a job a worker.
        self.workers_per_job = workers_per_job
        #: What a job of several imports before it forks its workers (config
        #: ``pool_preload``, read now: ``auto`` names what this program has imported).
        self.preload = preload_modules(cfg.pool_preload) if workers_per_job > 1 else []
        self.process_class = process_class
        self.size = size
        # Large initargs (an ES noise table) are pickled once, and sent once per host
        # and mapped by its workers: each worker's arguments hold a handle to them.
        self.initargs: Any = share_if_large(initargs) if initializer is not None else ()
        self.initializer, self.maxtasks = initializer, maxtasks
        self.resources = resources
        self.hub = _runtime.hub()
        self.name = b"pool" + secrets.token_hex(6).encode()
        self.service = PoolService(self.name, cfg.pool_prefetch, maxtasks,
                                   cfg.pool_max_task_retries, self._on_worker_gone,
                                   cfg.spin_us * 1e-6)
        self.service.server = self.hub
        self.service.late_factor = cfg.pool_late_factor
        self.service.lifetime = _renew.lifetime(
            cfg.pool_worker_lifetime, backend_of(process_class).job_time_limit(),
            cfg.pool_renew_margin)
        self.service.wake = self.wake
        self.service.replace_in = self._replace_in
        self.hub.register(self.name, self.service)
        self.state = RUN
        self.broken: Optional[BaseException] = None
        self.startup_failures = 0
        self.window = max(16, 2 * size * (cfg.pool_prefetch + 1))
        self._worker_ids = itertools.count(1)
        self._job_numbers = itertools.count(1)
        self._task_ids = itertools.count(1)
        #: The pool's single calls (apply, an executor's submit), numbered as they come:
        #: what names each one's task, as a map's tasks are named by their items' places.
        self._call_numbers = itertools.count()
        self._function_ids = itertools.count(1)
        self._fids: collections.OrderedDict[Any, Tuple[int, Any]] = collections.OrderedDict()
        self._callbacks: Optional[CallbackThread] = None
        #: Set once the maintainer has started its first workers (or needs none):
        #: ``pool._pool`` lists them, with their pids, from then on, as
        #: multiprocessing's right after Pool().
        self.workers_known = threading.Event()
        #: Started jobs that have not ended yet, by sentinel (kept open for the pool, see
        #: `keep_sentinel`: the program may close a job's process it found first).
        self.procs: Dict[int, PoolJob] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        #: Held to write to the wake pipe or close it: once the maintainer has ended, a
        #: wake must not write to the number its write end had, which a later pipe or file
        #: of the program may have taken (a stdlib queue's pipe received b"x" so).
        self._wake_lock = threading.Lock()
        #: The maintainer's wake pipe and every started worker's sentinel: a worker's end
        #: costs one event, not a new wait on every sentinel of the pool.
        self._exits = selectors.DefaultSelector()
        self._exits.register(self._wake_r, selectors.EVENT_READ, None)
        #: imap iterators (weakly: one dropped is not fed on), fed after close() by:
        self.imaps: weakref.WeakSet[_draining.Feeding] = weakref.WeakSet()
        self.drainer: Optional[threading.Thread] = None
        self.maintainer = threading.Thread(target=self._maintain, daemon=True,
                                           name=f"fiber-pool-{self.name.decode()[4:]}")
        self.maintainer.start()

    # -- submitting ------------------------------------------------------------------------

    def callbacks(self) -> CallbackThread:
        if self._callbacks is None:
            self._callbacks = CallbackThread(f"fiber-pool-callbacks-{self.name.decode()[4:]}")
        return self._callbacks

    def _fid(self, fn: Callable[..., object]) -> int:
        """The id of ``fn`` as pickled now (called under the hub lock).

        The function is pickled at every submission, so a callable's state is the one it
        has when submitted; equal pickles share an id, so a worker receives each once."""
        # A plain function is taken as it is (pickling one defined in __main__ by value
        # costs ~100 us): the same object keeps its id. Other callables (bound methods,
        # objects, partials) carry state, pickled at each submission.
        plain = isinstance(fn, (types.FunctionType, types.BuiltinFunctionType))
        if plain:
            entry = self._fids.get(("function", id(fn)))
            if entry is not None and entry[1] is fn:
                self._fids.move_to_end(("function", id(fn)))
                return entry[0]
        frames = dumps(fn)
        key: Any = (("function", id(fn)) if plain
                    else bytes(frames[0]) if len(frames) == 1 else None)  # big: not cached
        entry = self._fids.get(key) if key is not None else None
        if entry is not None:
            self._fids.move_to_end(key)
            return entry[0]
        fid = next(self._function_ids)
        self.service.functions[fid] = frames
        if key is not None:
            self._fids[key] = (fid, fn)  # keeps fn alive: its id cannot be reused meanwhile
            self.service.cached_functions.add(fid)
            while len(self._fids) > _FUNCTION_CACHE:
                _, (old, _fn) = self._fids.popitem(last=False)
                self.service.cached_functions.discard(old)
                self.service.release_function(old)
        return fid

    def imap_window(self) -> int:
        """How many chunks an ``imap`` keeps submitted and not yet consumed: twice what
        the workers hold on a fast link, or on slow links twice what covers their round
        trips (see ``_credit``)."""
        far = self.service.far_room() if self.service.far else 0
        return max(self.window, 2 * far)

    def check_running(self, accepted: bool = False) -> None:
        """Raise unless the pool takes tasks (``accepted``: an ``imap``'s, see `_draining`)."""
        if self.state != RUN and not (accepted and self.state == CLOSE):
            raise ValueError("Pool not running")
        if self.broken is not None:
            raise BrokenPoolError(f"the pool is broken: {self.broken}") from self.broken

    def submit(self, fn: Callable[..., object], mode: int,
               items: Iterable[Tuple[int, Sequence[object]]],
               job: ResultSink, label: str, serving: Optional[Serving] = None,
               chunksize: int = 1, accepted: bool = False) -> List[Task]:
        """Queue one task per ``(index, data)``; a task that cannot be pickled fails alone.
        A map's ``data`` is the chunk of ``chunksize`` items whose first is item ``index *
        chunksize`` of the call (what ``pool.status()`` counts and names); a single call's
        (``mode`` CALL) is named by its number among the pool's single calls.

        Tasks are pickled and queued in slices, so that the workers start on the first
        ones while the rest of a long map is being pickled (5,000 tasks take ~50 ms).
        ``serving`` (the hub's, of a caller that waits for the result next) is started
        just before the last slice is queued, once every item is pickled.

        Raises:
            ValueError, BrokenPoolError: the pool is not running (nothing was queued).
        """
        with self.hub.lock:
            self.check_running(accepted)
            try:
                fid = self._fid(fn)
            except Exception as e:
                with probing():
                    error = explained(e, f"the function of {label}", fn, "function")
                for index, _ in items:
                    job.deliver(index, False, dumps(pack_local_exception(error)))
                return []
            self.service.function_refs[fid] += 1  # kept while tasks are being queued
        tasks: List[Task] = []
        pending: List[Task] = []
        source = iter(items)
        try:
            for index, data in source:
                # taken before pickling: a call whose arguments cannot be pickled keeps
                # its number, and the numbers follow the program's calls
                first = next(self._call_numbers) if mode == CALL else index * chunksize
                try:
                    # a tuple: the collector stops tracking it (a list stays tracked,
                    # and a round of 10,000 tasks promoted 10,000 more to the oldest
                    # generation, whose full collection then came more often)
                    frames = tuple(dumps((mode, data)))
                except Exception as e:
                    with probing():
                        error = _explain_task(e, mode, data, index, label)
                    job.deliver(index, False, dumps(pack_local_exception(error)))
                    continue
                pending.append(Task(next(self._task_ids), job, index, fid, frames, label,
                                    first, 1 if mode == CALL else len(data)))
                if len(pending) >= (_SLICE if tasks else min(self.window, _SLICE)):
                    # the hub thread serves while later slices are pickled (this thread
                    # would read nothing then: heartbeats must not go unread)
                    self._enqueue(pending, tasks, job, source, None, accepted)
                    pending = []
            self._enqueue(pending, tasks, job, source, serving, accepted)
        finally:
            with self.hub.lock:
                self.service.function_refs[fid] -= 1
                self.service.release_function(fid)
        return tasks

    def _enqueue(self, pending: List[Task], tasks: List[Task], job: ResultSink,
                 rest: Iterator[Tuple[int, Sequence[object]]], serving: Optional[Serving],
                 accepted: bool = False) -> None:
        """Queue a slice of tasks; if the pool stopped after an earlier slice, the slice
        and the items not pickled yet fail with the reason (their result must come)."""
        if serving is not None:
            serving.start()
        with self.hub.lock:
            try:
                self.check_running(accepted)
            except Exception as e:
                if not tasks:
                    raise
                record = dumps(pack_local_exception(e))
                for index in [t.index for t in pending] + [i for i, _ in rest]:
                    job.deliver(index, False, record)
                return
            self.service.submit(pending)
        tasks.extend(pending)

    def cancel(self, task: Task) -> bool:
        """Withdraw a task no worker holds yet; False once it was handed out."""
        with self.hub.lock:
            return self.service.cancel(task)

    # -- workers ---------------------------------------------------------------------------

    def live_workers(self) -> List[WorkerState]:
        return [ws for ws in self.service.workers.values() if not ws.lost]

    def _new_job(self, count: int, avoid: FrozenSet[str]) -> PoolJob:
        """A job of ``count`` new workers (not started): the worker's own job, or, in a
        pool of jobs of several, a job that forks them (`_group`), asking for the
        resources of ``count`` workers."""
        wids = [next(self._worker_ids) for _ in range(count)]
        forks = self.workers_per_job > 1
        args: Tuple[Any, ...] = (self.hub.address, self.name, wids[0], self.initializer,
                                 self.initargs, self.maxtasks)
        target: Callable[..., None] = worker_main
        name = f"PoolWorker-{wids[0]}"
        if forks:
            target, name = group_main, f"PoolJob-{next(self._job_numbers)}"
            args = (*args[:2], wids, *args[3:], self.preload)
        proc = self.process_class(target=target, name=name, daemon=True, args=args)
        set_resources(proc, self.resources.times(count) if forks else self.resources)
        set_placement(proc, avoid)
        if forks:  # its workers' lines are tagged with their names (see _tagged)
            mark_tagged_output(proc)
        end_with_parent(proc)  # a worker serves this pool only
        end_said_elsewhere(proc)  # its loss or retirement: the pool's words
        job = PoolJob(proc, forks)
        for wid in wids:
            WorkerState(wid, proc, f"PoolWorker-{wid}", job)
        return job

    def _replace_in(self, ended: WorkerState) -> Optional[WorkerState]:
        """Under the hub lock: a worker to fork in the job of ``ended`` (a job of
        several), which has ended there, if the pool needs one now; else None. Not in
        place of a worker that retired (its job is ending, and the maintainer has
        replaced it) nor of one that never started (its host may be what fails it: the
        maintainer places the next elsewhere, and counts the failures); after
        ``close()``, only while tasks wait in the queue (else each would be stopped at
        once)."""
        job = ended.job
        working = (self.state == RUN or (
            self.state == CLOSE and bool(self.service.queue))) and not program_exiting()
        if (job is None or not working or self.broken is not None or not job.alive
                or job.process.cancelled or ended.retiring or ended.retired_why
                or not ended.started or self.service.active() >= self.size):
            return None
        # lost and said: forgotten (replaced for days), not those awaited (its end says)
        job.workers = [ws for ws in job.workers if not ws.lost or ws.loss is not None
                       or ws.worker_id in self.service.awaiting]
        wid = next(self._worker_ids)
        ws = WorkerState(wid, job.process, f"PoolWorker-{wid}", job)
        self.service.add_worker(ws)
        return ws

    def _start_workers(self, count: int,
                       replaces: Optional[List[WorkerState]] = None) -> None:
        """Start ``count`` workers, in jobs of ``workers_per_job``; each of ``replaces``
        (renewed: see `_renew`), if given, is replaced by one of them."""
        with self.hub.lock:
            avoid = self.service.suspected_hosts()  # not on a host cut off (see _late)
        if avoid:
            log("no new worker on %s: %s silent", ", ".join(sorted(avoid)),
                "it is" if len(avoid) == 1 else "they are")
        per_job = self.workers_per_job
        jobs = [self._new_job(min(per_job, count - first), avoid)
                for first in range(0, count, per_job)]
        states = [ws for job in jobs for ws in job.workers]
        for ws, old in zip(states, replaces or []):
            ws.replaces = old
        with self.hub.lock:  # known before they start: a quick one says hello at once
            for ws in states:
                self.service.add_worker(ws)
        try:
            start_all([job.process for job in jobs])
        except Exception as e:
            with self.hub.lock:
                for job in jobs:  # one that connected meanwhile gives its tasks back
                    job.alive = False
                for ws in states:
                    self.service.worker_lost(ws)
                if not self.live_workers():
                    self._break(e)
            return
        with self.hub.lock:
            for job in jobs:
                keep_sentinel(job.process)
                self.procs[job.process.sentinel] = job
                self._exits.register(job.process.sentinel, selectors.EVENT_READ, job)
            terminated = self.state == TERMINATE
        self.workers_known.set()  # started: pool._pool's pids are set, as multiprocessing's
        if terminated:  # terminate() ran while these were being submitted
            terminate_all([job.process for job in jobs])

    def _on_worker_gone(self, ws: WorkerState, expected: bool) -> None:
        """Called under the hub lock when a worker is lost or has exited."""
        if ws.started:
            self.startup_failures = 0
        elif not expected and _self_inflicted(ws.exitcode):
            self.startup_failures += 1
            if self.startup_failures >= _MAX_STARTUP_FAILURES and not any(
                    w.connected for w in self.live_workers()):
                failures = self.service.init_failures
                reason = (f"the pool's initializer raised:\n{failures.last}" if failures.last
                          else f"the last worker's job ended with {describe_exit(ws)}"
                          " before it connected")
                failures.said("; the pool is broken (BrokenPoolError)")
                self._break(BrokenPoolError(
                    f"{self.startup_failures} workers in a row failed to start: {reason}"))
        self.wake()

    def _break(self, exc: BaseException) -> None:
        if self.broken is None:
            self.broken = exc
            self.service.fail_all(exc)

    def wake(self) -> None:
        """Wake the maintainer (nothing once it has ended)."""
        with self._wake_lock:
            if self._wake_w < 0:
                return
            try:
                os.write(self._wake_w, b"x")
            except (BlockingIOError, OSError):
                pass

    def _maintain(self) -> None:
        try:
            while True:
                with self.hub.lock:
                    active = self.service.active()
                    # After close(), lost workers are replaced while tasks wait in the
                    # queue; not while the last run and the idle ones stop (each would be
                    # stopped at once, and replaced again). Never once the program ends
                    # its children at exit (ended, not lost: waited for, for ever).
                    working = (self.state == RUN or (
                        self.state == CLOSE and bool(self.service.queue))
                    ) and not program_exiting()
                    need = self.size - active if working and self.broken is None else 0
                    # (closing: imaps drained, see close(); giving_up: results owed)
                    if (self.state != RUN and self.service.closing and not self.procs
                            and need <= 0 and not self.service.giving_up):
                        return
                    now = time.monotonic()
                    # (only in a pass that starts none: taken, they are marked renewed)
                    renew = self.service.due_renewals(now) if (
                        working and self.broken is None and need <= 0) else []
                    at = self.service.next_renewal()
                if need > 0:
                    self._start_workers(need)
                    continue
                self.workers_known.set()
                for olds in _renew.by_job(renew):  # ahead of their job's known end
                    self._start_workers(len(olds), replaces=olds)  # (see _renew)
                if renew:
                    continue
                for key, _ in self._exits.select(None if at is None else max(0.0, at - now)):
                    job = key.data
                    if job is None:
                        os.read(self._wake_r, 4096)
                        continue
                    self._exits.unregister(key.fd)
                    with self.hub.lock:
                        self.service.job_ended(job, exitcode_of(job.process))
                        del self.procs[key.fd]
                    release_ended(job.process, owner=True)  # joinable still, as a user may
        except Exception as e:  # a bug or an unforeseen error: the pool fails, loudly
            sys.stderr.write(f"fiber: the maintainer of {self.name.decode()} failed; the pool is "
                             "broken (BrokenPoolError):\n")
            traceback.print_exc()
            error = BrokenPoolError(f"the pool's maintainer thread failed: {e!r}")
            error.__cause__ = e
            with self.hub.lock:  # what waits fails now; a live job has no reaper left
                self._break(error)
                jobs = list(self.procs.values())
            terminate_all([job.process for job in jobs])
        finally:
            self.workers_known.set()
            self._exits.close()
            with self._wake_lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1

    # -- life cycle ----------------------------------------------------------------------

    def resize(self, size: int) -> None:
        check_size(size)
        with self.hub.lock:
            grow = size - self.service.active()
        if grow > 0:
            ensure_open_files(-(-grow // self.workers_per_job),
                              f"growing the pool to {size} workers",
                              files_per_job(self.process_class))
        with self.hub.lock:
            self.check_running()
            self.size = size
            surplus = self.service.active() - size
            if surplus > 0:
                self.service.retire(surplus)
        self.wake()

    def close(self) -> None:
        with self.hub.lock:
            if self.state == RUN:
                self.state = CLOSE
                self.drainer = _draining.start(self.imaps, self._closed, self.hub.lock, self.wake)
                if self.drainer is None:
                    self._closed()
        self.wake()

    def _closed(self) -> None:  # (under the hub's lock) all taken is queued: idle ones go
        if self.state == CLOSE:
            self.service.closing = True
            self.service.stop_idle_workers()

    def terminate(self) -> None:
        with self.hub.lock:
            if self.state == TERMINATE:
                return
            self.state = TERMINATE
            self.service.closing = True
            self.service.fail_all(PoolTerminatedError("the pool was terminated"))
            jobs = list(self.procs.values())
        terminate_all([job.process for job in jobs])
        self.wake()
        self.join()

    def join(self) -> None:
        if self.drainer is not None:
            self.drainer.join()
        if self.maintainer is not threading.current_thread():
            self.maintainer.join()
            # what the workers wrote is on the terminal when join returns
            launcher().wait_ended_output(_OUTPUT_WAIT_S)
        if self._callbacks is not None:
            self._callbacks.stop()
        with self.hub.lock:  # initializer failures counted since the last said
            self.service.init_failures.said()
        self.hub.unregister(self.name)
        if isinstance(self.initargs, Shared):
            self.initargs.release()


def terminate_collected(core: PoolCore) -> None:
    """A pool dropped by its user (or left at exit): terminate it. Garbage collection may
    run this in any thread, inside a lock terminating needs: the hub's, held here (its
    joins wait for threads that wait for it) or by a thread the hub waits to see started,
    or the runtime's, held while it starts the hub. Then it is done on a thread of its
    own; otherwise here, so that a collected pool has ended when the collection returns.

    A pool still running then is said in a ``ResourceWarning`` (shown with ``-W default``
    or ``-X dev``), in ``multiprocessing.Pool``'s words, so that filters written for it
    apply."""
    if core.state == RUN:
        warnings.warn(f"unclosed running multiprocessing pool (a fiber Pool of {core.size} "
                      "workers): terminated as it was collected", ResourceWarning,
                      stacklevel=2)
    lock = core.hub.lock
    if not _runtime.starting_hub() and not held_here(lock) and lock.acquire(blocking=False):
        lock.release()  # free: terminate here
        core.terminate()
        return
    try:
        threading.Thread(target=core.terminate, name="fiber-pool-collected",
                         daemon=True).start()
    except RuntimeError:  # at the interpreter's exit (3.12 refuses new threads)
        core.terminate()
