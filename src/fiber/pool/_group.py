"""A job of several pool workers (``workers_per_job`` > 1): its process forks them.

One cluster job holds K workers (one Slurm array task, one pod, one ssh process), so
that a pool of thousands of workers is hundreds of cluster jobs, not thousands. The job's
process is the *group*: it forks its K workers from itself, each running the worker's
loop (`_worker.worker_main`) with a connection of its own to the master::

    master ──▶ job: its worker ids [3, 4, 5, 6]
    group:  a worker forked per id (warm: the job's interpreter and imports are theirs)
    a worker ends (the group's waitpid, at once):
        [pool, worker_ended, req, worker id, exit code] ──▶ master
        ◀── the id of the worker to fork in its place (forked at once: milliseconds,
            no cluster round trip), or b"" (the pool has enough, or is ending)
    the group ends once its last worker has ended and none replaces it.

The master keeps one record a worker (`WorkerState`) and one a job (`PoolJob`): a worker
that dies in its job is lost as any worker is (its tasks go to others, one warning), and
replaced in the job; a job that dies loses its workers at once. Signals for the job (the
cluster's walltime notice, ``terminate``) go to every worker, which retires as one of its
own (see `_retire`). A worker ends with its group (``PR_SET_PDEATHSIG``): a job the
cluster kills leaves nothing behind.

Each worker still has its own link to the master: the relay (one link a host) is the next
step, see docs/contributing/workers-per-job.md. What the workers print goes out through
the job's output, prefixed with the job's name.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

from .._core._clients import get_client
from ..process import _output, current_process
from ..process._relay import FORWARDED_SIGNALS, die_with
from ._protocol import PoolOps
from ._worker import worker_main

__all__ = ["group_main"]

#: Seconds the group waits for the master to answer a worker's end (then: no replacement).
_ASK_S = 30.0


class _Group:
    def __init__(self, address: str, pool_name: bytes,
                 run: Callable[[int], None]) -> None:
        self.address = address
        self.pool_name = pool_name
        self.run = run
        self.children: Dict[int, int] = {}  # pid -> worker id
        self.pid = os.getpid()

    def forward(self, signum: int, frame: Any) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass

    def fork(self, worker_id: int) -> None:
        """Fork the worker ``worker_id``. The job's signals are blocked across the fork:
        one that came before the child reset its handlers would be forwarded by the
        child's copy of this group (to no one) and lost."""
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
        try:
            with warnings.catch_warnings():  # the job's threads are not the child's
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            sys.stderr.write(f"fiber: cannot fork worker {worker_id}: {e}\n")
            self.ended(worker_id, 1)
            return
        if pid == 0:
            code = 1
            try:
                for sig in FORWARDED_SIGNALS:
                    signal.signal(sig, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                die_with(self.pid)
                current_process().name = f"PoolWorker-{worker_id}"
                self.run(worker_id)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                _output.stop()
                os._exit(code)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        self.children[pid] = worker_id

    def ended(self, worker_id: int, code: int) -> None:
        """Tell the master that ``worker_id`` ended with ``code``; fork the worker it
        names in its place, if any. A master that cannot be told is ending: none."""
        try:
            status, payload = get_client(self.address).request(
                self.pool_name, PoolOps.WORKER_ENDED,
                [worker_id.to_bytes(8, "little"), str(code).encode()], timeout=_ASK_S)
        except Exception:
            return
        new = bytes(payload[0]) if status == b"ok" and payload else b""
        if new:
            self.fork(int.from_bytes(new, "little"))

    def serve(self, worker_ids: List[int]) -> None:
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self.forward)
        for worker_id in worker_ids:
            self.fork(worker_id)
        while self.children:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                return
            if pid in self.children:
                self.ended(self.children.pop(pid), os.waitstatus_to_exitcode(status))


def group_main(address: str, pool_name: bytes, worker_ids: List[int],
               initializer: Optional[Callable[..., Any]], initargs: Tuple[Any, ...],
               maxtasks: Optional[int]) -> None:
    """The target of a job of several workers: fork ``worker_ids``, replace those that
    end as the master says, return once none is left."""

    def run(worker_id: int) -> None:
        worker_main(address, pool_name, worker_id, initializer, initargs, maxtasks)

    _Group(address, pool_name, run).serve(worker_ids)
