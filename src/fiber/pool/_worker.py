"""The loop a pool worker runs (the target of each worker's job): tasks run in the order
received, results sent in batches, but never held behind a long task. The loop, drawn:
docs/contributing/pools.md, "The worker's loop"."""

from __future__ import annotations

import collections
import os
import sys
import time
import traceback
from typing import Any, Callable, Deque, Dict, List, Optional, Protocol, Sequence, Tuple

from .._core._clients import get_client, own_client
from ..config import get_config
from ..errors import MaybeEncodingError
from ..process import _output
from ..transport.client import Client, ConnectionLost
from ..transport.remote import format_user_exception, pack_exception
from ..transport.serialization import Frame, dumps, loads
from ..transport.unpicklable import explained
from . import _resume
from ._protocol import (
    InitFailed,
    PoolOps,
    Resume,
    WorkerHello,
    pack_results,
    remember,
    unpack_tasks,
)
from ._retire import Retirement

__all__ = ["worker_main", "PoolLink", "CALL", "MAP", "STARMAP"]

CALL, MAP, STARMAP = 0, 1, 2
_BATCH = 64
_BATCH_SECONDS = 0.002
_INIT_REPORT_S = 10.0  # seconds a worker whose initializer raised waits to be heard


def _error(exc: BaseException, stage: str) -> List[Frame]:
    if stage != "running the task":
        note = f"fiber: error while {stage}"
        try:
            exc.add_note(note)  # type: ignore[attr-defined]
        except AttributeError:  # Python < 3.11: the notes are kept as 3.11 keeps them
            try:
                exc.__notes__ = [*getattr(exc, "__notes__", ()), note]  # type: ignore[attr-defined]
            except AttributeError:
                pass
    return dumps(pack_exception(exc))


def _exit_error(exc: SystemExit) -> List[Frame]:
    """A task that raised ``SystemExit`` (``sys.exit()``): its caller gets a
    `RemoteError` saying so, with the traceback, instead of the
    ``SystemExit`` itself, which would end the caller without a word. The worker goes on."""
    _, _, _, tb = pack_exception(exc)
    return dumps((None, "SystemExit", f"sys.exit({exc.code!r}) in a pool task: it ends "
                  "neither its worker (which goes on) nor the caller", tb))


class _Function:
    """A function as received: unpickled on first use, its failure remembered."""

    __slots__ = ("frames", "fn", "error", "seconds")

    def __init__(self, frames: Sequence[Frame]) -> None:
        self.frames: Optional[Sequence[Frame]] = frames
        self.fn: Optional[Callable[..., Any]] = None
        self.error: Optional[BaseException] = None
        #: How long its tasks run here, a running average (None: none has run yet).
        self.seconds: Optional[float] = None

    def get(self) -> Callable[..., object]:
        if self.frames is not None:
            frames, self.frames = self.frames, None
            try:
                self.fn = loads(frames)
            except BaseException as e:
                self.error = e
        if self.error is not None:
            raise self.error
        assert self.fn is not None
        return self.fn


class FunctionCache:
    """The worker's side of the per-worker function LRU (see _pool_protocol)."""

    def __init__(self) -> None:
        self._entries: Dict[int, _Function] = {}

    def receive(self, fid: int, fn_frames: Optional[List[Frame]]) -> _Function:
        entry = self._entries[fid] if fn_frames is None else _Function(fn_frames)
        remember(self._entries, fid, entry)
        return entry


def run_task(function: _Function, arg_frames: Sequence[Frame]) -> Tuple[bool, List[Frame]]:
    """Run one task; returns (ok, frames of the value or of the exception record)."""
    try:
        fn = function.get()
        mode, data = loads(arg_frames)
    except BaseException as e:
        return False, _error(e, "unpickling the task")
    try:
        if mode == CALL:
            args, kwargs = data
            value = fn(*args, **kwargs)
        elif mode == MAP:
            value = [fn(x) for x in data]
        else:
            value = [fn(*x) for x in data]
    except SystemExit as e:  # reported as what it is, never a silent exit of the caller
        return False, _exit_error(e)
    except BaseException as e:
        return False, _error(e, "running the task")
    try:
        return True, dumps(value)
    except Exception as e:
        return False, _error(_encoding_error(e, value), "pickling the result")
    except BaseException as e:
        return False, _error(e, "pickling the result")


def _encoding_error(error: Exception, value: object) -> BaseException:
    """What ``multiprocessing.pool`` raises for a result it cannot send back:
    ``MaybeEncodingError`` (its ``exc`` says which part of the result failed), caused by
    the pickling error (whose traceback the caller sees)."""
    cause: BaseException = error
    try:
        cause = explained(error, "the result", value, "result")
    except Exception:  # noqa: S110 - explaining is best effort; the error itself goes back
        pass
    try:
        wrapped: BaseException = MaybeEncodingError(cause, value)  # repr(value) may raise
    except Exception:
        return cause
    wrapped.__cause__ = cause
    return wrapped


class SpinPays:
    """Whether an idle worker polls for its next task before it sleeps: only while the
    last wait ended within the polling time. A worker of an RL loop gets its next step
    within a round trip, and polls; a worker of an evolution strategy, of a round of one
    task each, waits for the whole round (the other workers' tasks): polling for it would
    only spend ``spin`` of CPU a task, which hundreds of workers that end their tasks at
    once take from each other and from the master (a Pool(1024) of 50 ms tasks on 2 CPUs:
    ~60 us of CPU a task). It still waits without polling once, then polls again as soon
    as a wait is short.

    A wait without polling counts as short up to twice ``spin``: it lasts longer than the
    same wait polled by this thread's wake-up and the sender's waking of its CPU (30-50
    us on a quiet VM, 100 us and more on a busy one). Held to ``spin``, a round trip near
    it (``apply`` in a loop on a slow or busy host) stopped the polling after one slow
    wait for good: slept, it never came within ``spin`` again (2x a polled one).
    """

    __slots__ = ("spin", "pays", "since", "polled")

    def __init__(self, spin: float) -> None:
        self.spin = spin
        self.pays = True
        self.since = 0.0
        self.polled = False

    def start(self) -> float:
        """The polling time for the wait that starts now (0: none)."""
        self.since = time.monotonic()
        self.polled = self.pays and self.spin > 0
        return self.spin if self.polled else 0.0

    def waited(self) -> None:
        """The wait that `start` began has ended."""
        waited = time.monotonic() - self.since
        self.pays = waited <= (self.spin if self.polled else 2 * self.spin)


class PoolLink(Protocol):
    """What the worker's loop needs of its way to the master: its connection (a
    `Client`), or its job's relay (`_group.RelayedLink`)."""

    def send(self, service: bytes, op: bytes, frames: Sequence[Frame] = ()) -> None:
        """Send a message that gets no reply."""

    def next_push(self, timeout: Optional[float], spin: float = 0.0
                  ) -> Optional[List[Frame]]:
        """The next message from the master, ``[b"", op, *payload]``, or None."""


def _report_init_failure(client: Optional[Client], address: str, pool_name: bytes,
                         worker_id: int) -> None:
    """Tell the master that the initializer raised, with its traceback, and wait until it
    has heard: the master says the first failure's traceback once and counts the
    repeats (see ``PoolService.init_failed``), rather than every worker printing its
    own. If the master cannot be told, the traceback goes to this job's stderr."""
    error = sys.exc_info()[1]
    # from the initializer's frame: the worker's loop that called it tells nothing
    tb = format_user_exception(error) if error is not None else traceback.format_exc()
    try:
        if client is None:  # a relayed worker: a connection for this alone
            client = own_client(address)
        status, _ = client.request(pool_name, PoolOps.INIT_FAILED,
                                   InitFailed(tb, worker_id).frames(), timeout=_INIT_REPORT_S)
    except Exception:
        status = b""
    if status != b"ok":
        sys.stderr.write(tb)


def worker_main(address: str, pool_name: bytes, worker_id: int,
                initializer: Optional[Callable[..., object]], initargs: Tuple[object, ...],
                maxtasks: Optional[int], relay: Optional[PoolLink] = None) -> None:
    """The worker's loop (see the module). ``relay``: its job's relay, for a worker of a
    job of several (see `_group`): its tasks and results go through it, and it connects
    to the master only for what else it asks (its initializer's failure, a retirement,
    its tasks' calls to the master's objects)."""
    # This thread's client: in a job, the anchor that fetched the job's payload (one
    # connection a worker). A task that calls an object of the master's hub (a queue, a
    # lock) waits for its reply on it too; tasks pushed meanwhile are kept for next_push.
    client: PoolLink
    if relay is None:
        own = get_client(address)
        assert isinstance(own, Client)  # a worker is a job: the master's hub is elsewhere
        client = own
    else:
        client = relay
    out: List[Tuple[int, bool, List[Frame]]] = []  # results not sent yet
    retire = Retirement(address, pool_name, worker_id, out)  # the cluster's signals
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException:
            _report_init_failure(client if isinstance(client, Client) else None, address,
                                 pool_name, worker_id)
            _output.stop()
            os._exit(1)
    if retire.requested:
        retire.wait_heard()
        return  # told to go before it took any task: nothing to hand back
    client.send(pool_name, PoolOps.HELLO, WorkerHello(worker_id).frames())
    spin_pays = SpinPays(get_config().spin_us * 1e-6)
    sync_output = _output.sync
    functions = FunctionCache()
    held: Deque[Tuple[int, _Function, Sequence[Any]]] = collections.deque()
    first_out = 0.0
    busy = 0.0
    done = 0
    stopping = False

    def flush() -> None:
        nonlocal busy
        if out:
            sync_output()  # what the tasks printed goes before their results
            client.send(pool_name, PoolOps.RESULTS, pack_results(out, busy))
            out.clear()
            busy = 0.0

    while True:
        try:
            while True:  # take in whatever arrived; wait only when there is nothing to do
                if out and not held and not stopping:
                    flush()
                finished = maxtasks is not None and done >= maxtasks
                idle = not (held or stopping or finished)
                # Idle, the next task (an RL step's) often comes within a round trip: it is
                # polled for, and read without a wake-up, while a CPU is spare (see
                # fiber.transport.cpus) and while polling pays (see SpinPays).
                if idle:
                    msg = client.next_push(None, spin_pays.start())
                    spin_pays.waited()
                else:
                    msg = client.next_push(0.0, 0.0)
                if msg is None:
                    break
                if msg[1] == PoolOps.TASKS:
                    for task_id, fid, fn_frames, arg_frames in unpack_tasks(msg[2:]):
                        held.append((task_id, functions.receive(fid, fn_frames), arg_frames))
                    if idle:
                        break  # run it now: what else came is taken in after it (in order)
                elif msg[1] == PoolOps.STOP:
                    stopping = True
            if not held or retire.requested:
                flush()
                if retire.requested:
                    retire.wait_heard()  # what it held the master takes back: then it ends
                    return
                if stopping or (maxtasks is not None and done >= maxtasks):
                    return
                continue
            if not retire.take(held[0][0]):
                continue  # told to go meanwhile: taken back above
            task_id, function, arg_frames = held.popleft()
            if out and (function.seconds is None or function.seconds > _BATCH_SECONDS):
                flush()  # results do not wait behind a task that may be long
            started = time.monotonic()
            ok, frames = run_task(function, arg_frames)
            now = time.monotonic()
            ran = now - started
            busy += ran
            function.seconds = ran if function.seconds is None else (
                0.7 * function.seconds + 0.3 * ran)
            if not out:
                first_out = started
            out.append((task_id, ok, frames))
            retire.running = None  # held as an unsent result from now on
            done += 1
            # Batch only results of quick tasks: a slow task's result goes out at once.
            if not held or len(out) >= _BATCH or now - first_out > _BATCH_SECONDS:
                flush()
            # Let go of the task's buffers only now: unmapping a large one (~0.7 ms for 10 MB)
            # is then done while the master reads the result, not before the next task.
            del arg_frames, frames
        except ConnectionLost:
            if stopping or relay is not None:
                return  # the master is ending the pool, or the job: nothing waits for it
            resume = Resume(worker_id, list(_resume.held_ids(held, out)))
            again = _resume.reconnect(address, pool_name, PoolOps.RESUME, resume.frames())
            if again is None:
                return  # given up by the master meanwhile: its tasks run elsewhere
            client = again[0]  # its unsent results go out as usual, from the loop
