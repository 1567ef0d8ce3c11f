"""``fiber.Ring``: N equal members started as fiber jobs, with torch.distributed's rendezvous.
A member that dies ends the others within a second or so, and the ring re-forms while
restarts are left. The rendezvous, drawn: docs/contributing/transport.md, "The Ring"."""

from __future__ import annotations

import signal
import sys
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ..backends import Resources
from ..connection import Pipe, wait
from ..context import FiberContext, get_context
from ..errors import RingError, TimeoutError
from ..meta import meta, resources_of
from ..process import Process, start_all, terminate_all
from ..process._process import release_ended
from ..transport.remote import unpack_exception
from ._member import member_main
from ._rendezvous import plan

__all__ = ["Ring"]

#: How long the ring lets the others run after a failure, to see which failure was first.
_SETTLE_S = 0.5
#: How long a member whose job ended may still deliver a message sent before it ended.
_LATE_MESSAGE_S = 0.5
#: How long the ring waits for a failed member's exit code (some clusters report it late).
_EXIT_CODE_WAIT_S = 5.0
#: How long the ring waits for its ended members to be gone.
_END_WAIT_S = 30.0


class _Failure(Exception):
    """Member ``rank`` failed: it raised (``record``) or ended before its answer."""

    def __init__(self, rank: int,
                 record: Optional[Tuple[object, str, str, str]] = None) -> None:
        self.rank = rank
        self.record = record
        self.others: List[int] = []  # ranks that failed within _SETTLE_S after it


class Ring:
    """``size`` equal members, each running ``func(rank, size, *args, **kwargs)`` in a
    fiber job with the rendezvous of ``torch.distributed`` (``env://``) in its environment.

    ``cpu``/``memory`` (MB)/``gpu`` are what each member's job asks for (over what
    ``@fiber.meta`` put on ``func``); ``context`` picks the backend (default: the
    configured one). ``max_restarts`` re-forms the whole ring after a failure, up to that
    many times. ``torch_store``: whether rank 0 serves torch's ``TCPStore`` on the port it
    reserved (None: when torch is importable there).

    Raises:
        TypeError, ValueError: a bad ``size``, ``func`` or ``max_restarts``.
    """

    def __init__(self, size: int, func: Callable[..., object], args: Iterable[object] = (),
                 kwargs: Optional[Mapping[str, object]] = None, *, max_restarts: int = 0,
                 cpu: Optional[float] = None, memory: Optional[int] = None,
                 gpu: Optional[int] = None, context: Optional[FiberContext] = None,
                 torch_store: Optional[bool] = None, name: str = "Ring") -> None:
        for label, value, least in (("size", size, 1), ("max_restarts", max_restarts, 0)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"Ring {label} must be an int, got {value!r}")
            if value < least:
                raise ValueError(f"Ring {label} must be at least {least}, got {value}")
        if not callable(func):
            raise TypeError(f"Ring func must be callable, got {func!r}")
        if torch_store not in (None, True, False):
            raise TypeError(f"Ring torch_store must be None, True or False, got {torch_store!r}")
        self.size = size
        self.func = func
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.max_restarts = max_restarts
        self.resources = Resources(cpu=cpu, memory_mb=memory, gpu=gpu).merged_over(
            resources_of(func) or Resources())
        self.context = context or get_context()
        self.torch_store = torch_store
        self.name = name
        self.restarts = 0  # how often the last run() re-formed the ring
        self.hosts: List[str] = []  # the address of each rank, once a rendezvous is done
        self.master_port: Optional[int] = None  # the rendezvous port, on hosts[0]

    def run(self, timeout: Optional[float] = None) -> List[Any]:
        """Start the members and return their return values, in rank order.

        Raises:
            RingError: a member raised or ended without returning, ``max_restarts`` times
                plus once; the others were ended first.
            fiber.TimeoutError: ``timeout`` seconds passed (every member was ended).
            BackendError: the backend could not create the jobs.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for restart in range(self.max_restarts + 1):
            self.restarts = restart
            try:
                return _Round(self, restart).run(deadline)
            except RingError as e:
                if restart == self.max_restarts:
                    raise
                sys.stderr.write(f"fiber: {e}; re-forming the ring "
                                 f"(restart {restart + 1} of {self.max_restarts})\n")
        raise AssertionError("unreachable")

    def _target(self) -> Callable[..., None]:
        empty = self.resources == Resources()
        return member_main if empty else meta(
            self.resources.cpu, self.resources.memory_mb, self.resources.gpu)(member_main)

    def __repr__(self) -> str:
        return f"<fiber.Ring {self.name} size={self.size} func={self.func!r}>"


class _Round:
    """One formation of a ring: its jobs, its pipes, its rendezvous."""

    def __init__(self, ring: Ring, restart: int) -> None:
        self.ring = ring
        self.restart = restart
        self.hosts = [""] * ring.size
        pipes = [Pipe() for _ in range(ring.size)]
        self.conns = [ours for ours, _ in pipes]
        target = ring._target()  # noqa: SLF001 - this module's class
        self.procs: List[Process] = [
            ring.context.Process(target=target, name=f"{ring.name}-{rank}", args=(
                rank, ring.size, theirs, ring.func, ring.args, ring.kwargs, ring.torch_store))
            for rank, (_, theirs) in enumerate(pipes)]
        self._theirs = [theirs for _, theirs in pipes]

    def run(self, deadline: Optional[float]) -> List[Any]:
        """Start the members, run the rendezvous, return the results in rank order."""
        try:
            return self._run(deadline)
        except _Failure as failure:
            error = self._fail(failure)
        finally:  # on success too: a member may linger after its answer
            self._end(self.procs)
            self._close()
        raise error  # outside the except: the _Failure is our bookkeeping, not a cause

    def _run(self, deadline: Optional[float]) -> List[Any]:
        start_all(self.procs)
        for conn in self._theirs:  # the jobs hold them now: EOF means a member is gone
            conn.close()
        hellos = self._gather("hello", deadline)
        self.hosts = [hellos[r].address for r in range(self.ring.size)]
        self.ring.hosts = list(self.hosts)
        self.ring.master_port = hellos[0].port
        envs = plan([hellos[r] for r in range(self.ring.size)], self.restart,
                    self.ring.max_restarts)
        for rank, conn in enumerate(self.conns):
            try:
                conn.send(("go", envs[rank], self.hosts, self.restart))
            except BrokenPipeError:  # it is gone already
                raise _Failure(rank) from None
        results = self._gather("done", deadline)
        return [results[r] for r in range(self.ring.size)]

    def _gather(self, kind: str, deadline: Optional[float]) -> Dict[int, Any]:
        """Every member's message of ``kind``; raises _Failure if a member failed.

        After the first failure the others are left running for ``_SETTLE_S``, so that
        the failure that came first is named, not one that it caused: when a member dies
        inside a collective, the others may raise (gloo: "connection closed by peer")
        before its pipe's EOF reaches us. A death is named before an exception.
        """
        got: Dict[int, Any] = {}
        failures: List[_Failure] = []
        settle: Optional[float] = None
        while True:
            failed = {f.rank for f in failures}
            pending = [r for r in range(self.ring.size) if r not in got and r not in failed]
            until = settle if settle is not None else deadline
            left = None if until is None else until - time.monotonic()
            if not pending or (settle is not None and left is not None and left <= 0):
                break
            if left is not None and left <= 0:
                raise TimeoutError(f"the ring of {self.ring.size} did not finish in time; "
                                   "its members were ended")
            ready = wait([self.conns[r] for r in pending]
                         + [self.procs[r].sentinel for r in pending], left)
            for r in pending:
                failure = self._read(r, kind, ready, got)
                if failure is not None:
                    failures.append(failure)
                    settle = settle or time.monotonic() + _SETTLE_S
        if failures:
            first = min(failures, key=lambda f: f.record is not None)  # stable: deaths first
            first.others = sorted(f.rank for f in failures if f is not first)
            raise first
        return got

    def _read(self, r: int, kind: str, ready: List[Any], got: Dict[int, Any]
              ) -> Optional[_Failure]:
        """Take member ``r``'s message if one is ready; its failure, if it failed."""
        conn = self.conns[r]
        if conn not in ready and self.procs[r].sentinel not in ready:
            return None
        if conn not in ready and not conn.poll(_LATE_MESSAGE_S):
            return _Failure(r)  # its job ended, and no message is on the way
        try:
            what, payload = conn.recv()
        except EOFError:
            return _Failure(r)
        if what == "error":
            return _Failure(r, payload)
        if what != kind:
            raise AssertionError(f"ring protocol: {what!r} while waiting for {kind!r}")
        got[r] = payload
        return None

    def _fail(self, failure: _Failure) -> RingError:
        """End every member; the error that names the failed one."""
        rank = failure.rank
        self._end([p for r, p in enumerate(self.procs) if r != rank])
        common: Dict[str, Any] = dict(host=self.hosts[rank], restarts=self.restart,
                                      others=failure.others)
        if failure.record is not None:
            cause = unpack_exception(failure.record)
            _, type_name, message, tb = failure.record
            error = RingError(rank, self.ring.size, f"raised {type_name}: {message}",
                              traceback=tb, **common)
            error.__cause__ = cause
            return error
        proc = self.procs[rank]
        proc.join(_EXIT_CODE_WAIT_S)
        code = proc.exitcode
        return RingError(rank, self.ring.size, _describe_end(code), exitcode=code, **common)

    def _end(self, procs: List[Process]) -> None:
        """Kill what still runs of ``procs`` and wait until they are gone."""
        terminate_all(procs, force=True)
        limit = time.monotonic() + _END_WAIT_S
        for proc in procs:
            proc.join(max(0.0, limit - time.monotonic()))

    def _close(self) -> None:
        for conn in self.conns + self._theirs:
            conn.close()
        for proc in self.procs:
            if not release_ended(proc):  # still running after _END_WAIT_S: a slow backend
                sys.stderr.write(f"fiber: {proc.name} did not end within {_END_WAIT_S} s\n")


def _describe_end(code: Optional[int]) -> str:
    if code is None:
        return "ended without returning (its exit code is unknown)"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name} (exit code {code})"
    return f"exited with exit code {code} without returning"
