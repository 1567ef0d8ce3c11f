"""Stand-in workers: a real master driven at sizes this machine cannot hold as processes.

The ``standins`` backend (registered by importing this module) hands each job it is
given to one of a few *stand-in processes*, each of which simulates thousands of pool
workers. Per worker, a stand-in makes what a real job makes
of the master's side of the wire: one TCP connection to the master's hub (from its own
loopback address, as from its own host), the handshake that proves the program's secret,
the fetch of the job's launch payload, the pool's hello, its tasks' results with the
time they ran, and the job's exit report; it says it with fiber's own framing, pickles
and pool protocol. What it does not do is the work: no worker process, no interpreter,
and a task is a timer of its length. Its tasks must be `sleep_for`'s; another function's
fail with a ``TypeError`` that says so.

An example and what the figures mean: docs/contributing/ci-tools.md."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import queue
import selectors
import subprocess
import sys
import threading
import time
from typing import Dict, List, Sequence

from fiber._core._runtime import JOB_ENV, PARENT_ENV
from fiber.backends import (
    Backend,
    JobHandle,
    JobSpec,
    JobState,
    JobStatus,
    register_backend,
)
from fiber.backends._job_command import bootstrap_parts
from fiber.errors import SubmitError
from fiber.transport.auth import SECRET_ENV

from . import subprocess_env

__all__ = ["StandInBackend", "configure", "sleep_for"]

_STATS_TIMEOUT_S = 10.0


def sleep_for(seconds: float) -> float:
    """A task that lasts ``seconds`` and returns them: a sleep in a real worker, a timer
    in a stand-in's (the only function a stand-in runs)."""
    time.sleep(seconds)
    return seconds


@dataclasses.dataclass(frozen=True)
class _Shape:
    processes: int = 4
    connecting: int = 128


_shape = _Shape()


def configure(processes: int = 4, connecting: int = 128) -> None:
    """How the stand-ins run, before the backend's first submit: ``processes`` stand-in
    processes, each holding up to ``connecting`` simulated workers between their connect
    and their hello (its others wait, as jobs a cluster has not started yet).

    Raises:
        ValueError: a number that is not positive.
    """
    global _shape
    for name, value in (("processes", processes), ("connecting", connecting)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    _shape = _Shape(processes, connecting)


class StandInBackend(Backend):
    """Jobs as simulated pool workers of a few stand-in processes on this machine."""

    name = "standins"

    def __init__(self) -> None:
        self._procs: List[subprocess.Popen] = []  # type: ignore[type-arg]
        self._start_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._states: Dict[str, JobStatus] = {}
        self._state_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._stats: queue.Queue = queue.Queue()  # type: ignore[type-arg]

    # -- the stand-in processes -------------------------------------------------------------

    def _started(self) -> List[subprocess.Popen]:  # type: ignore[type-arg]
        """The stand-in processes, started on first use; stand-in ``k`` connects from
        127.0.1.<k+1>, as if from a host of its own."""
        with self._start_lock:
            if not self._procs:
                shape = _shape
                for k in range(shape.processes):
                    argv = [sys.executable, "-m", "fiber_ci._standin",
                            f"127.0.1.{k + 1}", str(shape.connecting), f"standin-{k}"]
                    self._procs.append(subprocess.Popen(
                        argv, env=subprocess_env(), stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE, bufsize=0))
                threading.Thread(target=self._read, args=(list(self._procs),),
                                 name="fiber-standins", daemon=True).start()
            return self._procs

    def _read(self, procs: List[subprocess.Popen]) -> None:  # type: ignore[type-arg]
        """Take the stand-ins' reports: a job's end, or their statistics."""
        sel = selectors.DefaultSelector()
        buffers: Dict[int, bytes] = {}
        for proc in procs:
            sel.register(proc.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
            buffers[proc.stdout.fileno()] = b""  # type: ignore[union-attr]
        while buffers:
            for key, _ in sel.select():
                data = os.read(key.fd, 1 << 16)
                if not data:
                    sel.unregister(key.fileobj)
                    del buffers[key.fd]
                    continue
                lines = (buffers[key.fd] + data).split(b"\n")
                buffers[key.fd] = lines.pop()
                self._take(lines)
        sel.close()

    def _take(self, lines: List[bytes]) -> None:
        ended = False
        for line in lines:
            kind, _, rest = line.decode().partition(" ")
            if kind == "stats":
                self._stats.put(json.loads(rest))
            elif kind == "end":
                job_id, code_text = rest.split()
                code = int(code_text)
                state = (JobState.SUCCEEDED if code == 0 else
                         JobState.CANCELLED if code < 0 else JobState.FAILED)
                with self._state_lock:
                    if job_id in self._states:
                        self._states[job_id] = JobStatus(state, code)
                ended = True
        if ended:
            self.watcher().wake()

    def _tell(self, k: int, text: str) -> None:
        """Send stand-in ``k`` commands (a write that waits while it is busy)."""
        stdin = self._started()[k].stdin
        assert stdin is not None
        with self._write_lock:
            stdin.write(text.encode())

    def pids(self) -> List[int]:
        """The stand-in processes' ids (for their CPU time, say)."""
        return [proc.pid for proc in self._started()]

    def stats(self) -> List[Dict[str, float]]:
        """Each stand-in process's counts: simulated workers that said hello
        (``hellos``) and run now (``workers``), and its CPU time (``cpu_s``), in all;
        since it was last asked, tasks ended (``tasks``), how late their timers fired
        (``late_sum_s``, ``late_max_s``: the stand-in's own delay), and when
        (``time.monotonic``) the first and the last task started (``first_start``,
        ``last_start``) and the last one ended (``last_end``); 0 if none did."""
        procs = self._started()
        for k in range(len(procs)):
            self._tell(k, "stats\n")
        return [self._stats.get(timeout=_STATS_TIMEOUT_S) for _ in procs]

    # -- the Backend interface ----------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Hand each job to a stand-in process, round robin.

        Raises:
            SubmitError: a job is not a fiber job (its command is not the bootstrap).
        """
        procs = self._started()
        lines: List[List[str]] = [[] for _ in procs]
        handles = []
        for spec in specs:
            if bootstrap_parts(spec.command) is None:
                raise SubmitError("the standins backend runs fiber's pool workers only, "
                                  f"not {' '.join(spec.command)!r}", command=spec.command)
            n = next(self._ids)
            k = n % len(procs)
            job_id = f"standin-{n}"
            env = spec.env
            lines[k].append(f"job {job_id} {env[PARENT_ENV]} {env[JOB_ENV]} "
                            f"{env[SECRET_ENV]}\n")
            handles.append(JobHandle(job_id, self.name, host=f"standin-{k}"))
        with self._state_lock:
            for handle in handles:
                self._states[handle.job_id] = JobStatus(JobState.RUNNING)
        for k, batch in enumerate(lines):
            if batch:
                self._tell(k, "".join(batch))
        return handles

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        """RUNNING while a stand-in holds the job; then how it ended."""
        with self._state_lock:
            states = self._states
            return {h.job_id: states.get(h.job_id) or JobStatus(JobState.LOST, reason="unknown")
                    for h in handles}

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        """Close the jobs' connections at once (SIGTERM's, or SIGKILL's with ``force``)."""
        by_k: Dict[int, List[str]] = {}
        signal = 9 if force else 15
        for handle in handles:
            k = int(handle.host.rpartition("-")[2])
            by_k.setdefault(k, []).append(f"kill {handle.job_id} {signal}\n")
        for k, batch in by_k.items():
            self._tell(k, "".join(batch))

    def listen_host(self) -> str:
        """Loopback: the stand-ins are processes of this machine."""
        return "127.0.0.1"

    def release(self, handle: JobHandle) -> None:
        """Forget an ended job's state."""
        with self._state_lock:
            self._states.pop(handle.job_id, None)

    def close(self) -> None:
        """End the stand-in processes (their simulated workers' connections close)."""
        super().close()
        with self._start_lock:
            procs, self._procs = self._procs, []
        for proc in procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


register_backend("standins", StandInBackend)
