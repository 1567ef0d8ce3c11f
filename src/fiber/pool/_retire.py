"""A pool worker that its cluster tells to go (SIGTERM, a walltime notice) retires: it
reports the tasks it took, finishes the one it runs, and no task pays for it. The
exchange: docs/contributing/pools.md, "Retirement"."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from types import FrameType
from typing import List, NoReturn, Optional, Tuple

from .._core._clients import own_client
from .._process_state import here
from ..transport.serialization import Frame
from ._losses import tasks_text
from ._protocol import PoolOps, Retiring
from ._state import Task, WorkerState

__all__ = ["NOTICE_SIGNALS", "Retirement", "why", "plan"]

#: The signals with which a cluster tells a job to go: at once (SIGTERM) or soon (the
#: early warnings Slurm and Grid Engine send when asked to: SIGUSR1, SIGUSR2).
NOTICE_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2)
#: Seconds the worker waits for the master to say retire or die (then: die).
_ASK_S = 10.0


def why(signum: int) -> str:
    """What a retirement's signal says, in a user's words."""
    if signum == signal.SIGTERM:
        return "its cluster asked it to stop (SIGTERM: a time limit, preemption, eviction " \
               "or a person)"
    return f"its cluster's notice ({signal.Signals(signum).name}: a time limit or " \
           "preemption ahead)"


def plan(ws: WorkerState, given: List[Task]) -> str:
    """What a retiring worker ``ws`` does with its tasks (``given``: those it gave
    back), for its INFO line."""
    back = f"gives back {tasks_text(given)}" if given else "holds no other task"
    if ws.pending:
        return f"finishes {tasks_text(list(ws.pending.values()))}, {back}"
    return back


def _noop(signum: int, frame: Optional[FrameType]) -> None:
    """The Python-level handler: the work is the wake-up fd's (see `Retirement`)."""


class Retirement:
    """The worker's side: the signals, the flag its main thread checks before each task,
    and the thread that tells the master."""

    def __init__(self, address: str, pool_name: bytes, worker_id: int,
                 unsent: List[Tuple[int, bool, List[Frame]]]) -> None:
        self.lock = threading.Lock()
        #: The cluster told this worker to go (set under `lock`).
        self.requested = False
        #: The task the main thread runs (set under `lock` by `take`; None after it).
        self.running: Optional[int] = None
        #: The worker's results not sent yet (its list, read here as it is): with
        #: ``running``, the tasks it holds. A task whose result went out meanwhile may be
        #: named too: the master no longer holds it for this worker, and skips it.
        self._unsent = unsent
        #: The master has heard of the retirement: the worker may end (its connection's
        #: end must not reach the master before its retirement does).
        self.heard = threading.Event()
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        for sig in NOTICE_SIGNALS:
            signal.signal(sig, _noop)
        threading.Thread(target=self._watch, args=(address, pool_name, worker_id),
                         name="fiber-retire", daemon=True).start()

    def take(self, task_id: int) -> bool:
        """The main thread is about to run task ``task_id`` (it sets ``running`` back
        to None once the result is in its unsent list): False if it must not (the worker
        retires; the master gave that task to another worker). One lock a task: a set of
        the tasks held, kept here as well, cost a pool's round trip 5%."""
        with self.lock:
            if self.requested:
                return False
            self.running = task_id
            return True

    def _watch(self, address: str, pool_name: bytes, worker_id: int) -> None:
        while True:
            try:
                data = os.read(self._read, 64)
            except InterruptedError:
                continue
            got = [s for s in data if s in NOTICE_SIGNALS]
            if got:
                break
        signum = got[0]
        with self.lock:
            self.requested = True
            held = {task_id for task_id, _, _ in list(self._unsent)}
            if self.running is not None:
                held.add(self.running)
            request = Retiring(worker_id, signum, sorted(held))
        try:
            client = own_client(address)
            status, _ = client.request(pool_name, PoolOps.RETIRING, request.frames(),
                                       timeout=_ASK_S)
            client.close()
        except Exception:
            status = b"die"  # no master to hand the tasks to: end as the signal says
        if status != b"retire":
            _die_of(signum)
        self.heard.set()

    def wait_heard(self) -> None:
        """Before the worker ends: until the master has heard of its retirement (at most
        as long as the question may take)."""
        self.heard.wait(_ASK_S + 1)


def _die_of(signum: int) -> NoReturn:
    """End this process by ``signum``'s default action, from a thread (which cannot call
    `signal.signal`): the C library's own handler reset, then the signal again."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal(signum, ctypes.c_void_p(0))  # SIG_DFL
        os.kill(here.pid, signum)
        time.sleep(5)
    except (OSError, AttributeError):
        pass
    os._exit(128 + signum)
