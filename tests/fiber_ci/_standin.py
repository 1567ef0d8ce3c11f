"""A stand-in process: many simulated pool workers, each a real connection to the master.
They say on the wire what a real worker says, but do no work (a task is a timer). The
protocol, drawn: docs/contributing/testing.md, "Stand-in workers"."""

from __future__ import annotations

import collections
import errno
import heapq
import itertools
import json
import os
import pickle
import resource
import select
import socket
import struct
import sys
import time
from types import MappingProxyType
from typing import Any, Deque, Dict, List, Optional, Sequence, Tuple

from fiber.pool._group import group_main
from fiber.pool._protocol import (
    JOB_ID,
    PoolOps,
    WorkerEnded,
    WorkerHello,
    pack_results,
    pack_results_of,
    pack_to,
    split_results,
    unpack_tasks,
    unpack_to,
)
from fiber.pool._worker import CALL, MAP, worker_main
from fiber.process._launcher import SERVICE, ExitReport, Fetch, LaunchOps
from fiber.transport import auth
from fiber.transport.framing import FrameReader, Outbox, ProtocolError, new_scratch
from fiber.transport.remote import pack_exception
from fiber.transport.serialization import Frame, dumps, loads
from fiber.transport.sockets import server_id, split_address, tune

from .standins import sleep_for

#: Linux's ``IP_BIND_ADDRESS_NO_PORT``: the source port is chosen at connect, per
#: destination, so a stand-in's address is not limited to one set of ephemeral ports.
_BIND_NO_PORT = getattr(socket, "IP_BIND_ADDRESS_NO_PORT", 24)
#: A worker sends its results at once after a task this long (see fiber.pool._worker).
_BATCH_SECONDS = 0.002
_BATCH = 64
_EXIT_REQUEST = struct.pack("<Q", 2)
_FETCH_REQUEST = struct.pack("<Q", 1)

#: What `StandIn.report_stats` counts since it last reported: timers fired, their delays
#: (seconds), when the first and last task started and the last ended (time.monotonic).
_ROUND = MappingProxyType({"tasks": 0, "late_sum_s": 0.0, "late_max_s": 0.0, "first_start": 0.0,
                           "last_start": 0.0, "last_end": 0.0})

# a simulated job's states
CONNECTING, HELLO_SENT, AUTH_SENT, FETCHING, RUNNING, EXITING = range(6)


class Worker:
    """One simulated worker: what it holds, runs and has not sent yet."""

    __slots__ = ("wid", "held", "running", "out", "busy", "first_out", "stopping")

    def __init__(self, wid: int) -> None:
        self.wid = wid
        #: Tasks received and not started: (task id, seconds, result frames, error frames).
        self.held: Deque[Tuple[int, float, Any, Optional[List[Any]]]] = collections.deque()
        self.running: Optional[Tuple[int, float, Any, float]] = None  # + when it started
        self.out: List[Tuple[int, bool, Sequence[Frame]]] = []
        self.busy = self.first_out = 0.0
        self.stopping = False


class Sim:
    """One simulated job: its connection, where it is in its life, its workers (one; or,
    a job of several, those it relays as `fiber.pool._group` does)."""

    __slots__ = ("job_id", "hub", "token", "sock", "reader", "outbox", "state", "cnonce",
                 "process_id", "pool", "workers", "group", "up", "asked", "refused",
                 "writing", "queue")

    def __init__(self, job_id: str, hub: str, token: bytes) -> None:
        self.job_id, self.hub, self.token = job_id, hub, token
        self.sock: Optional[socket.socket] = None
        self.reader: Optional[FrameReader] = None
        self.outbox = Outbox()
        self.state = CONNECTING
        self.cnonce = self.process_id = self.pool = b""
        self.workers: Dict[int, Worker] = {}
        self.group = False
        #: A group's messages from its workers, relayed at the end of the event.
        self.up: List[Tuple[int, List[Frame]]] = []
        self.asked = 0  # a group's worker_ended requests not answered yet
        self.refused: Dict[int, Optional[List[Frame]]] = {}  # function id -> error frames
        self.writing = False
        #: Tasks handed to the job itself (``JOB_ID``), not yet to a worker: each goes to
        #: the first of its workers to be free (see `fiber.pool._jobqueue`).
        self.queue: Deque[Tuple[int, float, Any, Optional[List[Any]]]] = collections.deque()


class StandIn:
    """The event loop of one stand-in process."""

    def __init__(self, source: str, connecting: int, host: str) -> None:
        self.source = source
        self.host = host  # the host its jobs say they run on
        self.connecting = connecting  # simulated jobs between connect and hello, at most
        self.starting = 0
        self.epoll = select.epoll()
        self.by_fd: Dict[int, Sim] = {}
        self.jobs: Dict[str, Sim] = {}
        self.waiting: Deque[Sim] = collections.deque()
        self.timers: List[Tuple[float, int, Sim, Worker]] = []
        self.seq = itertools.count()
        self.requests = itertools.count(3)  # ids 1 and 2: the fetch and the exit report
        self.scratch = new_scratch()  # every reader's: one thread reads them in turn
        self.verdicts: Dict[bytes, Optional[List[Frame]]] = {}  # function pickle -> error
        self.lengths: Dict[bytes, Tuple[float, List[Frame]]] = {}  # see `length`
        self.stdin_buf = b""
        self.stats = {"hellos": 0, **_ROUND}
        self.epoll.register(0, select.EPOLLIN)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        while True:
            timeout = max(0.0, self.timers[0][0] - time.monotonic()) if self.timers else -1
            ready = self.epoll.poll(timeout)
            # (looked up before any is handled: a command may end a job, whose number a
            # new job's socket then takes; its stale event must not reach the new job)
            for sim, events in [(self.by_fd.get(fd), events) for fd, events in ready]:
                if sim is not None and sim.sock is not None:
                    self.on_event(sim, events)
                    self.relay(sim)
            if any(fd == 0 for fd, _ in ready) and not self.read_commands():
                return
            self.fire_timers()

    def read_commands(self) -> bool:
        """Take the master's commands; False at the end of stdin (the master is gone)."""
        data = os.read(0, 1 << 20)
        if not data:
            for sim in list(self.jobs.values()):
                self.end(sim, 1, report=False)
            return False
        lines = (self.stdin_buf + data).split(b"\n")
        self.stdin_buf = lines.pop()
        for line in lines:
            words = line.decode().split() or [""]
            if words[0] == "job":
                self.add_job(*words[1:])
            elif words[0] == "kill":
                killed = self.jobs.get(words[1])
                if killed is not None:
                    self.end(killed, -int(words[2]))
            elif words[0] == "stats":
                self.report_stats()
        self.start_connections()
        return True

    def add_job(self, job_id: str, hub: str, token: str, secret: str) -> None:
        auth.adopt_secret(bytes.fromhex(secret))  # the program's: the same for every job
        sim = Sim(job_id, hub, bytes.fromhex(token))
        self.jobs[job_id] = sim
        self.waiting.append(sim)

    def report_stats(self) -> None:
        """Say what this process did since it was last asked, and its CPU time."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        stats = dict(self.stats, cpu_s=usage.ru_utime + usage.ru_stime,
                     workers=sum(len(s.workers) for s in self.jobs.values()
                                 if s.state == RUNNING))
        self.stats.update(_ROUND)
        _say(f"stats {json.dumps(stats)}")

    def start_connections(self) -> None:
        while self.waiting and self.starting < self.connecting:
            sim = self.waiting.popleft()
            self.starting += 1
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_IP, _BIND_NO_PORT, 1)
            sock.bind((self.source, 0))
            sock.setblocking(False)
            sim.sock = sock
            self.by_fd[sock.fileno()] = sim
            error = sock.connect_ex(split_address(sim.hub))
            if error not in (0, errno.EINPROGRESS):
                self.end(sim, 1)
                continue
            self.epoll.register(sock.fileno(), select.EPOLLOUT)

    # -- a simulated job's connection ------------------------------------------------------

    def on_event(self, sim: Sim, events: int) -> None:
        assert sim.sock is not None
        if sim.state == CONNECTING:
            self.connected(sim)
            return
        if events & select.EPOLLOUT:
            try:
                done = sim.outbox.flush(sim.sock)
            except OSError:
                self.end(sim, 1)
                return
            self.want_write(sim, not done)
        if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
            self.read(sim)

    def connected(self, sim: Sim) -> None:
        """The connection is made (or failed): the handshake's first message, as a job's
        anchor says it (`fiber.transport.client.Client._handshake`)."""
        assert sim.sock is not None
        if sim.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
            self.end(sim, 1)
            return
        tune(sim.sock, 1.0, 30.0)  # a job's defaults, until its config arrives
        sim.reader = FrameReader(max_message=None, scratch=self.scratch)
        sim.cnonce, sim.process_id = auth.new_nonce(), os.urandom(16)
        self.epoll.modify(sim.sock.fileno(), select.EPOLLIN)
        sim.state = HELLO_SENT
        self.send(sim, auth.ClientHello(sim.cnonce, sim.process_id, True).frames())

    def read(self, sim: Sim) -> None:
        assert sim.sock is not None and sim.reader is not None
        try:
            alive = sim.reader.feed_from(sim.sock)
        except BlockingIOError:
            return
        except (OSError, ProtocolError):
            alive = False
        messages = sim.reader.messages
        while messages and sim.sock is not None:
            self.on_message(sim, messages.popleft())
        if not alive and sim.sock is not None:
            self.end(sim, 1)  # the master closed it: a job's lifeline ends it so

    def on_message(self, sim: Sim, msg: List[Frame]) -> None:
        if sim.state == RUNNING:
            if msg[0]:  # a reply: to a group's worker_ended
                if sim.group:
                    self.answered(sim, msg)
            elif sim.group and msg[1] == PoolOps.TO:
                for wid, frames in unpack_to(msg[2:]):
                    if wid == JOB_ID:
                        self.job_tasks(sim, bytes(frames[0]), list(frames[1:]))
                        continue
                    worker = sim.workers.get(wid)
                    if worker is not None:
                        self.pushed(sim, worker, bytes(frames[0]), list(frames[1:]))
            elif sim.workers:  # a job of one
                self.pushed(sim, next(iter(sim.workers.values())), bytes(msg[1]), msg[2:])
        elif sim.state == HELLO_SENT:
            self.challenged(sim, msg)
        elif sim.state == AUTH_SENT:
            try:
                auth.Admitted.decode(msg)
            except ValueError:  # DENY
                self.end(sim, 1)
                return
            sim.state = FETCHING
            self.send(sim, [SERVICE, LaunchOps.FETCH, _FETCH_REQUEST,
                            *Fetch(sim.token, os.getpid(), self.host).frames()])
        elif sim.state == FETCHING:
            self.fetched(sim, msg)
        elif sim.state == EXITING:
            self.end(sim, 0)  # its exit report was heard: it ends, as a job does

    def pushed(self, sim: Sim, worker: Worker, op: bytes, frames: Sequence[Frame]) -> None:
        if op == PoolOps.TASKS:
            self.take_tasks(sim, worker, frames)
        elif op == PoolOps.STOP:
            worker.stopping = True
            if worker.running is None:  # else once its task has ended
                self.next_task(sim, worker)

    def challenged(self, sim: Sim, msg: List[Frame]) -> None:
        """The server's challenge: check its proof and its id, prove ours."""
        try:
            chal = auth.Challenge.decode(msg)
        except (ValueError, IndexError):
            chal = None
        if (chal is None or not auth.verify(auth.server_proof(sim.cnonce, chal.nonce),
                                            chal.proof)
                or chal.server_id != server_id(sim.hub).encode()):
            self.end(sim, 1)
            return
        sim.state = AUTH_SENT
        self.send(sim, auth.ClientProof(auth.client_proof(sim.cnonce, chal.nonce)).frames())

    def fetched(self, sim: Sim, msg: List[Frame]) -> None:
        """Its launch payload: which pool, which workers, the program's heartbeat; then
        their hellos, as `fiber.pool._worker.worker_main` says them (relayed, for a job of
        several, as `fiber.pool._group` relays them)."""
        assert sim.sock is not None
        if msg[1] != b"ok":
            self.end(sim, 1)  # the job cannot start (unknown or finished)
            return
        payload = loads(msg[2:])
        proc = pickle.loads(payload["process"])  # fiber's own Process of worker_main
        target, args = proc._target, proc._args  # noqa: SLF001 - what its job would run
        if target not in (worker_main, group_main) or args[3] is not None \
                or args[5] is not None:
            _say_error(f"job {sim.job_id} is not a pool worker without initializer nor "
                       "maxtasksperchild: a stand-in runs only those")
            self.end(sim, 1)
            return
        cfg = payload["config"]
        tune(sim.sock, cfg.heartbeat_interval, cfg.heartbeat_timeout)
        sim.pool = args[1]
        sim.group = target is group_main
        sim.state = RUNNING
        self.starting -= 1
        for wid in (args[2] if sim.group else [args[2]]):
            self.hello(sim, Worker(wid))
        self.start_connections()

    def hello(self, sim: Sim, worker: Worker) -> None:
        sim.workers[worker.wid] = worker
        self.stats["hellos"] += 1
        self.to_master(sim, worker, [PoolOps.HELLO, *WorkerHello(worker.wid).frames()])

    def to_master(self, sim: Sim, worker: Worker, message: List[Frame]) -> None:
        """A worker's ``[op, *payload]`` to the master: its own (a job of one), or in its
        job's next relayed message."""
        if sim.group:
            sim.up.append((worker.wid, message))
        else:
            self.send(sim, [sim.pool, message[0], b"", *message[1:]])

    def relay(self, sim: Sim) -> None:
        """A group's messages from its workers since the last: one message."""
        if sim.up and sim.sock is not None:
            up, sim.up = sim.up, []
            said, results = split_results(up)  # as fiber.pool._group relays them
            if said:
                self.send(sim, [sim.pool, PoolOps.FROM, b"", *pack_to(said)])
            if results:
                self.send(sim, [sim.pool, PoolOps.RESULTS_OF, b"", *pack_results_of(results)])

    def answered(self, sim: Sim, msg: List[Frame]) -> None:
        """The master's answer to a worker's end: the worker it names starts, or none."""
        sim.asked -= 1
        new = bytes(msg[2]) if msg[1] == b"ok" and len(msg) > 2 else b""
        if new:
            self.hello(sim, Worker(int.from_bytes(new, "little")))
        self.maybe_exit(sim)

    # -- tasks -----------------------------------------------------------------------------

    def take_tasks(self, sim: Sim, worker: Worker, frames: Sequence[Frame]) -> None:
        worker.held.extend(self.tasks_of(sim, frames))
        if worker.running is None:
            self.next_task(sim, worker)

    def tasks_of(self, sim: Sim, frames: Sequence[Frame]
                 ) -> List[Tuple[int, float, Any, Optional[List[Any]]]]:
        out = []
        for task_id, fid, fn_frames, arg_frames in unpack_tasks(frames):
            if fn_frames is not None:
                sim.refused[fid] = self.verdict(fn_frames)
            error = sim.refused[fid]
            seconds, value = (0.0, None) if error is not None else self.length(arg_frames)
            out.append((task_id, seconds, value, error))
        return out

    def length(self, arg_frames: Sequence[Frame]) -> Tuple[float, List[Frame]]:
        """A task's length and its result's frames, from its argument's frames: kept by
        their bytes, since a round's tasks mostly share them (a real worker's CPU is its
        own; a stand-in's shares this machine's with the master it measures)."""
        key = b"".join(arg_frames)
        known = self.lengths.get(key)
        if known is None:
            seconds, value = _length(*loads(arg_frames))
            known = (seconds, dumps(value))
            if len(self.lengths) >= 1024:
                self.lengths.clear()
            self.lengths[key] = known
        return known

    def job_tasks(self, sim: Sim, op: bytes, frames: Sequence[Frame]) -> None:
        """Tasks for the job itself (its credit told aside): each worker free takes one."""
        if op == PoolOps.CREDIT:
            return
        sim.queue.extend(self.tasks_of(sim, frames))
        for worker in list(sim.workers.values()):
            if not sim.queue:
                break
            if worker.running is None and not worker.held and not worker.stopping:
                self.next_task(sim, worker)

    def verdict(self, fn_frames: Sequence[Frame]) -> Optional[List[Frame]]:
        """None for `standins.sleep_for`; else the error record its tasks return."""
        key = bytes(fn_frames[0])
        if key not in self.verdicts:
            fn = loads(fn_frames)
            error = None
            if fn is not sleep_for:
                error = dumps(pack_exception(TypeError(
                    f"a stand-in worker (fiber_ci.standins) runs only "
                    f"fiber_ci.standins.sleep_for, not {fn!r}")))
            self.verdicts[key] = error
        return self.verdicts[key]

    def next_task(self, sim: Sim, worker: Worker) -> None:
        """Start the worker's next task held (a timer), as a worker runs its tasks in
        order; or, told to stop and holding none, send what is left and end it."""
        if not worker.held and sim.queue and not worker.stopping:
            worker.held.append(sim.queue.popleft())  # (its job's queue: see job_tasks)
        while worker.held:
            task_id, seconds, value, error = worker.held.popleft()
            if error is not None:  # refused at once, as a task that raised
                self.finished(sim, worker, task_id, False, error, 0.0)
                continue
            now = time.monotonic()
            worker.running = (task_id, seconds, value, now)
            stats = self.stats
            stats["first_start"] = stats["first_start"] or now
            stats["last_start"] = now
            heapq.heappush(self.timers, (now + seconds, next(self.seq), sim, worker))
            return
        self.flush(sim, worker)
        if worker.stopping and sim.state == RUNNING and worker.wid in sim.workers:
            del sim.workers[worker.wid]
            if sim.group:  # its end, after what it sent (see fiber.pool._group)
                self.relay(sim)
                sim.asked += 1
                self.send(sim, [sim.pool, PoolOps.WORKER_ENDED,
                                struct.pack("<Q", next(self.requests)),
                                *WorkerEnded(worker.wid, 0).frames()])
            self.maybe_exit(sim)

    def maybe_exit(self, sim: Sim) -> None:
        """A job whose workers have all ended reports its exit, as _bootstrap does (code
        0, no relayed output)."""
        if not sim.workers and not sim.asked and sim.state == RUNNING:
            sim.state = EXITING
            self.send(sim, [SERVICE, LaunchOps.EXIT, _EXIT_REQUEST,
                            *ExitReport(sim.token, 0, False).frames()])

    def fire_timers(self) -> None:
        timers = self.timers
        now = time.monotonic()
        touched = set()
        while timers and timers[0][0] <= now:
            due, _, sim, worker = heapq.heappop(timers)
            late = now - due
            self.stats["late_sum_s"] += late
            self.stats["late_max_s"] = max(self.stats["late_max_s"], late)
            self.stats["tasks"] += 1
            self.stats["last_end"] = now
            if worker.running is None or sim.sock is None:
                continue  # ended meanwhile
            task_id, _, value, started = worker.running
            worker.running = None
            self.finished(sim, worker, task_id, True, value, now - started)
            self.next_task(sim, worker)
            touched.add(sim)
            now = time.monotonic()
        for sim in touched:
            self.relay(sim)

    def finished(self, sim: Sim, worker: Worker, task_id: int, ok: bool, frames: Sequence[Frame],
                 ran: float) -> None:
        """A task's result, sent as a worker sends it: at once after a task over 2 ms,
        else in a batch of up to 64 or 2 ms (`fiber.pool._worker.worker_main`)."""
        now = time.monotonic()
        if not worker.out:
            worker.first_out = now - ran
        worker.out.append((task_id, ok, frames))
        worker.busy += ran
        if (not worker.held or ran > _BATCH_SECONDS or len(worker.out) >= _BATCH
                or now - worker.first_out > _BATCH_SECONDS):
            self.flush(sim, worker)

    def flush(self, sim: Sim, worker: Worker) -> None:
        if worker.out and sim.sock is not None:
            frames = pack_results(worker.out, worker.busy)
            worker.out, worker.busy = [], 0.0
            self.to_master(sim, worker, [PoolOps.RESULTS, *frames])

    # -- writing, ending ---------------------------------------------------------------------

    def send(self, sim: Sim, frames: Sequence[Frame]) -> None:
        assert sim.sock is not None
        try:
            done = sim.outbox.write(sim.sock, frames)
        except OSError:
            self.end(sim, 1)
            return
        self.want_write(sim, not done)

    def want_write(self, sim: Sim, writing: bool) -> None:
        if writing != sim.writing and sim.sock is not None:
            sim.writing = writing
            mask = select.EPOLLIN | (select.EPOLLOUT if writing else 0)
            self.epoll.modify(sim.sock.fileno(), mask)

    def end(self, sim: Sim, code: int, report: bool = True) -> None:
        """The simulated job ends (``code``: its exit code, -signal if killed)."""
        if self.jobs.pop(sim.job_id, None) is None:
            return
        if sim.state < RUNNING:
            if sim.sock is not None:
                self.starting -= 1
            else:
                self.waiting.remove(sim)
        if sim.sock is not None:
            self.by_fd.pop(sim.sock.fileno(), None)
            sim.sock.close()  # (closing unregisters it from the epoll)
            sim.sock = None
        for worker in sim.workers.values():
            worker.held.clear()
            worker.running = None
        if report:
            _say(f"end {sim.job_id} {code}")
        self.start_connections()


def _length(mode: int, data: Any) -> Tuple[float, Any]:
    """How long a task of `standins.sleep_for` lasts, and what it returns: its
    argument (a call), or its items' (a map's chunk: run one after another)."""
    if mode == CALL:
        seconds = float(data[0][0])
        return seconds, seconds
    items = [float(x) for x in data] if mode == MAP else [float(x[0]) for x in data]
    return sum(items), items


def _say(line: str) -> None:
    data = (line + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def _say_error(text: str) -> None:
    sys.stderr.write(f"fiber stand-in: {text}\n")
    sys.stderr.flush()


def main() -> None:
    source, connecting, host = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    StandIn(source, connecting, host).run()


if __name__ == "__main__":
    main()
