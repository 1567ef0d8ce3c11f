"""A job seen from its parent's dashboard: its threads' Python stacks, its CPU time and memory.
Only with a ``dashboard``: a thread of the job's own answers on a connection of its own,
and a job reports nothing while nobody looks. The design: docs/contributing/processes.md,
"Inspection from the dashboard"."""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time
import traceback
from typing import Collection, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .._core import _runtime
from .._process_state import here as this_process
from ..transport.client import Client, ConnectionLost
from ..transport.operations import handles
from ..transport.serialization import Frame
from ..transport.server import Peer, Server, Service
from . import _launcher

__all__ = ["InspectService", "serve_parent", "register", "stack_of", "stats", "Hello",
           "Stats", "Stack", "AskStack", "Watching"]

SERVICE = b"inspect"
#: Seconds between a job's reports of its CPU time and memory, at least.
STATS_S = 2.0
#: Reports a second from all the jobs, at most (the interval grows with their number).
REPORTS_PER_S = 64
#: Seconds a watch lasts (the parent renews it while the dashboard reads the reports).
WATCH_S = 30.0


class InspectOps:
    """The inspect protocol's operations (messages to an `InspectService`; ``stack`` is
    also the parent's push to a job, which answers with its own)."""

    HELLO = b"hello"
    STATS = b"stats"
    STACK = b"stack"


#: The parent's push that asks a job for its reports (see the module).
WATCH = b"watch"


class Hello(NamedTuple):
    """``hello``: a job's launch token, its host's `here` and its pid (read in /proc
    by a parent on its host)."""

    token: bytes
    here: bytes
    pid: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Hello:
        if len(payload) < 3:  # a job that says no more than its token
            return cls(bytes(payload[0]), b"", 0)
        return cls(bytes(payload[0]), bytes(payload[1]), int(bytes(payload[2])))

    def frames(self) -> List[Frame]:
        return [self.token, self.here, str(self.pid).encode()]


class Stats(NamedTuple):
    """``stats``: a job's CPU seconds (to the millisecond) and resident bytes."""

    token: bytes
    cpu: float
    rss: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Stats:
        return cls(bytes(payload[0]), float(bytes(payload[1])), int(bytes(payload[2])))

    def frames(self) -> List[Frame]:
        return [self.token, f"{self.cpu:.3f}".encode(), str(self.rss).encode()]


class Stack(NamedTuple):
    """``stack``: a job's answer to the parent's push ``request``, its threads' stacks."""

    token: bytes
    request: bytes
    stacks: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Stack:
        return cls(bytes(payload[0]), bytes(payload[1]),
                   bytes(payload[2]).decode(errors="replace"))

    def frames(self) -> List[Frame]:
        return [self.token, self.request, self.stacks.encode(errors="replace")]


# -- the parent's pushes to a job (after ``[b"", op]``): records too ------------------------

class AskStack(NamedTuple):
    """``stack`` pushed: answer with a `Stack` that names ``request``."""

    request: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> AskStack:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.request]


class Watching(NamedTuple):
    """`WATCH` pushed: send `Stats` every ``interval`` s for the next ``seconds``."""

    seconds: float
    interval: float

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Watching:
        return cls(float(bytes(payload[0])), float(bytes(payload[1])))

    def frames(self) -> List[Frame]:
        return [f"{self.seconds:g}".encode(), f"{self.interval:g}".encode()]


# -- in the job ------------------------------------------------------------------------------

def _stacks() -> str:
    """Every thread's stack, innermost last, as a traceback reads (with source lines)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    # sys._current_frames is documented (the sys module), not a private name of a library
    for ident, frame in sys._current_frames().items():  # noqa: SLF001
        if ident == threading.get_ident():
            continue  # this thread, answering
        parts.append(f"Thread {names.get(ident, ident)!s}:\n"
                     + "".join(traceback.format_stack(frame)))
    return "\n".join(parts)


def _stat(pid: str) -> List[bytes]:
    """The fields of ``/proc/PID/stat`` (``pid`` or "self") from the state on (field 3:
    utime is ``[11]``, stime ``[12]``, starttime ``[19]``, rss in pages ``[21]``), read in
    one system call (a file object costs 3x: a poll reads up to 100 jobs).

    Raises:
        OSError, ValueError: /proc does not say (the process has ended).
    """
    fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
    try:
        stat = os.read(fd, 4096)
    finally:
        os.close(fd)
    return stat[stat.rindex(b")") + 2:].split()


def _usage() -> Tuple[float, int]:
    """This process's CPU seconds and resident bytes (0 where /proc does not say)."""
    try:
        rss = int(_stat("self")[21]) * _PAGE
    except (OSError, ValueError, IndexError):
        rss = 0
    return time.process_time(), rss


def here() -> bytes:
    """What tells this process's host apart, as its parent can see it: its kernel's boot
    id, and its process and network namespaces (b"" where /proc does not say). A job
    with its parent's can have its usage read by the parent in /proc (see the module)."""
    state = this_process.jobs
    if state.host_identity is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as f:
                boot = f.read().strip()
            spaces = [os.stat(f"/proc/self/ns/{ns}").st_ino for ns in ("pid", "net")]
            state.host_identity = boot + b":" + b":".join(str(i).encode() for i in spaces)
        except OSError:
            state.host_identity = b""
    return state.host_identity


def serve_parent(parent: str, token: bytes) -> None:
    """Answer the parent's dashboard from a daemon thread (see the module)."""
    threading.Thread(target=_serve, args=(parent, token), name="fiber-inspected",
                     daemon=True).start()


def _serve(parent: str, token: bytes) -> None:
    try:
        client = Client(parent)
        client.send(SERVICE, InspectOps.HELLO, Hello(token, here(), this_process.pid).frames())
        watched_until = next_stats = interval = 0.0
        while True:
            now = time.monotonic()
            if now < watched_until and now >= next_stats:
                cpu, rss = _usage()
                client.send(SERVICE, InspectOps.STATS, Stats(token, cpu, rss).frames())
                next_stats = now + interval
            wait = (max(0.0, min(next_stats, watched_until) - time.monotonic())
                    if now < watched_until else None)  # None: until the parent asks
            msg = client.next_push(wait)
            if msg is None or len(msg) < 3:
                continue
            op, body = bytes(msg[1]), msg[2:]  # (a push: b"", its op, its record's frames)
            if op == InspectOps.STACK:
                asked = AskStack.decode(body).request
                client.send(SERVICE, InspectOps.STACK, Stack(token, asked, _stacks()).frames())
            elif op == WATCH and len(body) > 1:
                watch = Watching.decode(body)
                now = time.monotonic()
                if now >= watched_until:
                    next_stats = now  # report at once: the page shows it within its update
                watched_until = now + watch.seconds
                interval = watch.interval
    except (ConnectionLost, OSError, ValueError):
        return  # the parent is gone: the lifelines end this job


# -- in the parent ---------------------------------------------------------------------------

class _Job:
    __slots__ = ("peer", "name", "pid", "cpu", "rss", "at", "cpu_percent")

    def __init__(self, peer: Peer, name: str, pid: int = 0) -> None:
        self.peer, self.name = peer, name
        self.pid = pid  # on this host: read in /proc (see the module); else 0
        self.cpu = self.at = self.cpu_percent = 0.0
        self.rss = 0

    def record(self, cpu: float, rss: int, now: float, age: float = 0.0) -> None:
        """Its CPU seconds and resident bytes at ``now`` (reported, or read): its CPU
        use since the last ones, or, the first time, over its ``age`` if given."""
        if self.at:
            self.cpu_percent = round(100 * (cpu - self.cpu) / max(1e-3, now - self.at), 1)
        elif age:
            self.cpu_percent = round(100 * cpu / max(1e-3, age), 1)
        self.cpu, self.at, self.rss = cpu, now, rss

    def read(self, now: float, uptime: float) -> None:
        """Read this job's usage in /proc (a job on this host); nothing if it has ended."""
        try:
            fields = _stat(str(self.pid))
            cpu = (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime
            started, rss = int(fields[19]) / _TICKS, int(fields[21]) * _PAGE
        except (OSError, ValueError, IndexError):
            return  # ended
        self.record(cpu, rss, now, age=uptime - started)


_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _uptime() -> float:
    with open("/proc/uptime", "rb") as f:
        return float(f.read().split()[0])


class InspectService(Service):
    """The jobs that answer this process's dashboard, by name (under the hub's lock)."""

    protocol = "inspect"

    def __init__(self, launches: _launcher.LaunchService) -> None:
        self.launches = launches  # the jobs' names, by token
        self.jobs: Dict[str, _Job] = {}
        self.by_peer: Dict[int, str] = {}
        #: request id -> (the event its caller waits on, where the answer goes)
        self.waiting: Dict[bytes, Tuple[threading.Event, List[str]]] = {}
        self.watch_sent = -WATCH_S  # when the jobs were last asked for reports

    @handles(InspectOps.HELLO, Hello)
    def hello(self, server: Server, peer: Peer, req_id: bytes, msg: Hello) -> None:
        """A job with this process's `here` is read in /proc."""
        name = self.launches.name_of(msg.token)
        if name:
            local = msg.here and msg.here == here()
            job = self.jobs[name] = _Job(peer, name, msg.pid if local else 0)
            self.by_peer[peer.peer_id] = name
            if not job.pid and time.monotonic() - self.watch_sent < WATCH_S:
                server.send(peer, self._watch())  # watched: a newcomer too

    def watch(self, server: Server) -> None:
        """Ask every job for reports for `WATCH_S` seconds, if the last ask is half that
        old (the dashboard reads the reports: `stats`)."""
        now = time.monotonic()
        if now - self.watch_sent < WATCH_S / 2:
            return
        self.watch_sent = now
        message = self._watch()
        for job in self.jobs.values():
            if not job.pid:  # (the others are read here)
                server.send(job.peer, message)

    def _watch(self) -> List[Frame]:
        reporting = sum(1 for job in self.jobs.values() if not job.pid)
        interval = max(STATS_S, reporting / REPORTS_PER_S)
        return [b"", WATCH, *Watching(WATCH_S, interval).frames()]

    @handles(InspectOps.STATS, Stats)
    def report(self, server: Server, peer: Peer, req_id: bytes, msg: Stats) -> None:
        job = self.jobs.get(self.by_peer.get(peer.peer_id, ""))
        if job is None:
            return
        job.record(msg.cpu, msg.rss, time.monotonic())

    @handles(InspectOps.STACK, Stack)
    def stack(self, server: Server, peer: Peer, req_id: bytes, msg: Stack) -> None:
        waiter = self.waiting.pop(msg.request, None)
        if waiter is not None:
            waiter[1].append(msg.stacks)
            waiter[0].set()

    def peer_gone(self, server: Server, peer: Peer) -> None:
        name = self.by_peer.pop(peer.peer_id, None)
        if name is not None and self.jobs.get(name) is not None \
                and self.jobs[name].peer is peer:
            del self.jobs[name]


def register() -> InspectService:
    """This process's inspect service, on its hub (made once)."""
    launches = _launcher.launcher()  # (first: a service is made under the hub's lock)
    return _runtime.hub().ensure(SERVICE, InspectService, lambda: InspectService(launches))


def stats(names: Optional[Collection[str]] = None) -> Dict[str, Dict[str, float]]:
    """The last reports of the jobs ``names`` (None: all): name -> {cpu_percent, rss_mb};
    the jobs report while this is asked (see the module)."""
    service = register()
    hub = _runtime.hub()
    with hub.lock:
        service.watch(hub)
        # by name: the page shows 100 of a Pool(1024)'s workers; a pass over all 1,024
        # jobs touched each, every second
        jobs = (list(service.jobs.values()) if names is None
                else [job for job in map(service.jobs.get, names) if job is not None])
    now, uptime = time.monotonic(), 0.0
    for job in jobs:  # (one caller at a time: the dashboard's snapshot is under its lock)
        if job.pid and now - job.at >= STATS_S:
            uptime = uptime or _uptime()
            job.read(now, uptime)
    # read outside the lock: each report replaces a job's figures, a float at a time
    return {job.name: {"cpu_percent": job.cpu_percent, "rss_mb": round(job.rss / 2**20, 1)}
            for job in jobs if job.at}


def stack_of(name: str, timeout: float = 5.0) -> str:
    """The Python stacks of job ``name``'s threads, asked of the job now.

    Raises:
        LookupError: no such job answers this process. TimeoutError: it did not answer
        within ``timeout`` seconds (its host unreachable, say).
    """
    service = register()
    hub = _runtime.hub()
    request = secrets.token_bytes(8)
    done, answer = threading.Event(), []  # type: ignore[var-annotated]
    with hub.lock:
        job = service.jobs.get(name)
        if job is None:
            raise LookupError(f"no job named {name!r} answers (a dashboard's jobs only)")
        service.waiting[request] = (done, answer)
        hub.send(job.peer, [b"", InspectOps.STACK, *AskStack(request).frames()])
    if not done.wait(timeout):
        with hub.lock:
            service.waiting.pop(request, None)
        raise TimeoutError(f"{name} did not send its stack within {timeout:g} s")
    return str(answer[0])
