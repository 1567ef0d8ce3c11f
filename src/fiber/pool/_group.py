"""A job of several pool workers (``workers_per_job`` > 1): it forks them from itself and
relays their messages on its one connection to the master; one that dies is replaced in
it. The design: docs/contributing/pools.md, "A job of several workers"."""

from __future__ import annotations

import gc
import os
import selectors
import signal
import socket
import sys
import time
import traceback
import warnings
from types import FrameType
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .._core._clients import get_client
from .._log import log
from .._preload import import_modules
from .._process_state import here
from ..process import _output, current_process
from ..process._relay import FORWARDED_SIGNALS, die_with
from ..transport import cpus
from ..transport.client import Client, ConnectionLost
from ..transport.framing import FrameReader, Outbox, ProtocolError, send_frames
from ..transport.operations import reply_of
from ..transport.serialization import Frame
from ..transport.sockets import readable
from . import _resume
from ._jobqueue import JobQueue, Queued
from ._protocol import (
    JOB_ID,
    Kept,
    PoolOps,
    Replacement,
    ResumeJob,
    WorkerEnded,
    pack_results_of,
    pack_to,
    result_ids,
    split_results,
    task_ids,
    unpack_to,
)
from ._tagged import Stream, WorkerPipes
from ._worker import PoolLink, worker_main

__all__ = ["group_main", "RelayedLink"]

#: Seconds the group reads what an ended worker sent last (a process it forked may
#: hold the worker's end of the pair open: then what came by then).
_LAST_WORDS_S = 1.0


class RelayedLink:
    """A worker's end of its socket pair with its group: the worker's `PoolLink`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = FrameReader()

    def send(self, service: bytes, op: bytes, frames: Sequence[Frame] = ()) -> None:
        try:
            send_frames(self.sock, [op, *frames], unix=False)
        except OSError as e:
            raise ConnectionLost(f"its job is gone: {e}") from None

    def next_push(self, timeout: Optional[float], spin: float = 0.0
                  ) -> Optional[List[Frame]]:
        messages = self._reader.messages
        if spin and not messages:
            cpus.poll(lambda: messages or (self._feed(socket.MSG_DONTWAIT) and messages), spin)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not messages:
            flags = 0
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                if left == 0:
                    flags = socket.MSG_DONTWAIT
                elif not readable([self.sock], left):
                    return None
            if not self._feed(flags):
                return None
        return messages.popleft()

    def _feed(self, flags: int) -> bool:
        try:
            alive = self._reader.feed_from(self.sock, flags)
        except BlockingIOError:
            return False
        except (OSError, ProtocolError) as e:
            raise ConnectionLost(f"its job is gone: {e}") from None
        if not alive:
            raise ConnectionLost("its job is gone")
        return True


class _Link:
    """The group's end of one worker's pair."""

    __slots__ = ("worker_id", "sock", "reader", "outbox", "open", "stopping", "unwritten")

    def __init__(self, worker_id: int, sock: socket.socket) -> None:
        self.worker_id = worker_id
        self.sock = sock
        sock.setblocking(False)
        self.reader = FrameReader()
        #: What is on its way to the worker: the group never blocks on a worker, which
        #: may itself be sending the group a large result (both would wait for ever).
        self.outbox = Outbox()
        self.open = True
        self.stopping = False  # told to stop: it takes no task of the job's queue
        #: The job's tasks it was handed in messages not written whole when handed, each
        #: with the outbox's count of bytes written once that message is: those still
        #: short of it when the worker dies never reached it (see `_reap`).
        self.unwritten: List[Tuple[int, List[Queued]]] = []


class _Group:
    """The job: its workers (``run`` each, forked), its connection to the master at
    ``address`` (``client``), and what it holds for them while that connection fails."""

    def __init__(self, address: str, pool_name: bytes,
                 run: Callable[[int, PoolLink], None], client: Client) -> None:
        self.address = address
        self.pool_name = pool_name
        self.run = run
        self.client = client
        self.children: Dict[int, _Link] = {}  # pid -> its link
        self.links: Dict[int, _Link] = {}  # worker id -> its link
        #: What the workers sent, not relayed yet: (worker id, [op, *payload]) each.
        self.up: List[Tuple[int, List[Any]]] = []
        #: The tasks handed to each worker and not answered (relayed up) yet, by id: what
        #: the master is asked to keep for it if the connection is reset (`resume`).
        self.held: Dict[int, Dict[int, None]] = {}
        #: Workers' ends the master could not be told (the connection failed): told
        #: once it is back (`resume`), as (worker id, exit code).
        self.untold: List[Tuple[int, int, List[int]]] = []
        #: The tasks the master handed the job itself, not yet to a worker (see `_jobs`).
        self.jobq = JobQueue()
        self.pid = here.pid
        self.selector = selectors.DefaultSelector()
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        self.wake_w = wake_w
        #: The workers' own stdout and stderr, where the job's output is forwarded: each
        #: line tagged with its worker's name (see `_tagged`), by worker id.
        self.pipes = WorkerPipes(self.selector) if _output.forwarded() else None
        #: The signals the job got and passed on to its workers (see `forward`).
        self.signalled: List[int] = []

    def forward(self, signum: int, frame: Optional[FrameType]) -> None:
        """Pass a signal the job got on to its workers; those forked later get it too
        (`fork`): a terminate() or a walltime notice that comes while the job still
        forks its workers must reach every one (the last ones hung in their
        initializer)."""
        if signum not in self.signalled:
            self.signalled.append(signum)
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
        ours, theirs = socket.socketpair()
        pipes = self.pipes.make() if self.pipes is not None else None
        # The worker's collections must not walk (and so copy, page by page) what this
        # group imported and made: it is never the worker's garbage.
        gc.freeze()
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS + (signal.SIGCHLD,))
        try:
            with warnings.catch_warnings():  # the job's threads are not the child's
                warnings.simplefilter("ignore", DeprecationWarning)
                pid = os.fork()
        except OSError as e:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            ours.close()
            theirs.close()
            if self.pipes is not None and pipes is not None:
                self.pipes.drop(pipes)
            sys.stderr.write(f"fiber: cannot fork worker {worker_id}: {e}\n")
            self.ended(worker_id, 1)  # it never started: the master replaces it elsewhere
            return
        if pid == 0:
            self._become_worker(worker_id, theirs, ours, mask, pipes)
        theirs.close()
        if self.pipes is not None and pipes is not None:
            self.pipes.watch(worker_id, f"PoolWorker-{worker_id}", pipes)
        link = _Link(worker_id, ours)
        self.children[pid] = link  # before a signal held meanwhile is forwarded
        self.links[worker_id] = link
        self.held[worker_id] = {}
        self.selector.register(ours, selectors.EVENT_READ, link)
        for signum in self.signalled:  # the job's already: pending in it till it starts
            os.kill(pid, signum)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _become_worker(self, worker_id: int, sock: socket.socket, other: socket.socket,
                       mask: Iterable[int], pipes: Optional[Tuple[int, int, int, int]]) -> None:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for sig in FORWARDED_SIGNALS + (signal.SIGCHLD,):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            die_with(self.pid)
            other.close()
            for link in self.children.values():  # its siblings' pairs are not its own
                link.sock.close()
            if self.pipes is not None and pipes is not None:
                self.pipes.in_worker(pipes)
                _output.forked_worker()
            self.selector.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            current_process().name = f"PoolWorker-{worker_id}"
            self.run(worker_id, RelayedLink(sock))
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            _output.stop()
            os._exit(code)

    def ended(self, worker_id: int, code: int, held: Sequence[int] = ()) -> bool:
        """Tell the master that ``worker_id`` ended with ``code``, holding the tasks
        ``held`` (their ids); fork the worker it names in its place, if any (never for
        one that did not start). A master that cannot be told is ending: none. No time
        limit: a slow link's answer still names a worker the master counts on; the
        connection's end is the failure. False: not told (kept in ``untold``, told
        when the connection comes back)."""
        try:
            status, payload = self.client.request(
                self.pool_name, PoolOps.WORKER_ENDED,
                WorkerEnded(worker_id, code, held).frames())
        except Exception:  # told if the connection comes back
            self.untold.append((worker_id, code, list(held)))
            return False
        new = reply_of(Replacement, payload).worker_id if status == b"ok" else None
        if new is not None:
            self.fork(new)
        return True

    def _from_master(self) -> None:
        """Hand every message the master sent to the workers it names."""
        while True:
            msg = self.client.next_push(0.0)
            if msg is None:
                return
            if bytes(msg[1]) != PoolOps.TO:
                continue
            for worker_id, frames in unpack_to(msg[2:]):
                if worker_id == JOB_ID:
                    self.jobq.received(frames)
                    continue
                held = self.held.get(worker_id)
                if held is not None and bytes(frames[0]) == PoolOps.TASKS:
                    held.update(dict.fromkeys(task_ids(frames[1:])))
                elif bytes(frames[0]) == PoolOps.STOP and worker_id in self.links:
                    self.links[worker_id].stopping = True
                self._send_to(worker_id, frames)
            self._spread()

    def _spread(self) -> None:
        """Hand the tasks of the job's queue to its workers that may take them. A worker
        that died and is not reaped yet (its end of the pair closed: the send fails) is
        handed none: what it was given goes back to the queue, for the others, and is
        not named with its end (the master would charge it to that end: it never ran)."""
        while self.jobq.queue:
            takers = {worker_id: self.held[worker_id]
                      for worker_id, link in self.links.items()
                      if link.open and not link.stopping}
            dead = False
            for worker_id, frames, given in self.jobq.spread(takers):
                link = self.links[worker_id]
                if not self._send_to(worker_id, frames):
                    link.stopping = True  # (it takes none of the job's)
                    self.jobq.take_back(worker_id, given, self.held[worker_id])
                    dead = True
                elif link.outbox.items:  # (written whole once the outbox has written all)
                    link.unwritten.append((link.outbox.nbytes + link.outbox.queued(), given))
            if not dead:
                return

    def _send_to(self, worker_id: int, frames: Sequence[Frame]) -> bool:
        """Send worker ``worker_id`` ``[op, *payload]`` (the rest when it reads). False:
        it has ended (its end is reaped, or will be), and the message is not sent."""
        link = self.links.get(worker_id)
        if link is None or not link.open:
            return False
        waiting = bool(link.outbox.items)
        try:
            done = link.outbox.write(link.sock, [b"", *frames])
        except OSError:
            return False
        if not done and not waiting:  # the rest when the worker reads
            self.selector.modify(link.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, link)
        return True

    def _to_worker(self, link: _Link) -> None:
        """Write on what waits for worker ``link``, now that it reads."""
        try:
            done = link.outbox.flush(link.sock)
        except OSError:
            done = True  # it has ended: its end is reaped (what was not written, too)
        else:
            if done:
                link.unwritten.clear()
        if done and link.open:
            self.selector.modify(link.sock, selectors.EVENT_READ, link)

    def _from_worker(self, link: _Link, flags: int = socket.MSG_DONTWAIT) -> bool:
        """Read what worker ``link`` sent, to `_relay`; False once its end of the pair
        is closed."""
        try:
            alive = link.reader.feed_from(link.sock, flags)
        except BlockingIOError:
            return True
        except ProtocolError as e:  # a bug: the worker, whose tasks wait on it, is ended
            sys.stderr.write(f"fiber: PoolWorker-{link.worker_id} sent its job a malformed "
                             f"message ({e}): its link is closed, and it ends\n")
            try:
                link.sock.shutdown(socket.SHUT_RDWR)  # (what it reads or writes next fails)
            except OSError:
                pass
            alive = False
        except OSError:
            alive = False
        messages = link.reader.messages
        while messages:
            self.up.append((link.worker_id, messages.popleft()))
        if not alive and link.open:
            link.open = False
            self.selector.unregister(link.sock)
        return alive

    def _relay(self) -> None:
        """Send the master what the workers sent: their hellos in one message, then their
        results in one (`pack_results_of`): the results of a round's tasks that ended
        together are one message a job, not one a worker."""
        if self.up:
            if self.pipes is not None and self.pipes.wrote:  # its tasks' lines first
                self.pipes.wrote = False
                _output.sync()
            up = self.up
            said, results = split_results(up)
            if said:
                self.client.send(self.pool_name, PoolOps.FROM, pack_to(said))
                self.up = results  # (the hellos went: a reset now sends them again itself)
            if results:
                self.client.send(self.pool_name, PoolOps.RESULTS_OF, pack_results_of(results))
            self.up = []  # (kept, to be sent again, if the connection failed)
            for worker_id, msg in up:
                held = self.held.get(worker_id)
                if held is not None and bytes(msg[0]) == PoolOps.RESULTS:
                    ids = [task_id for task_id in result_ids(msg[1:]) if task_id in held]
                    for task_id in ids:  # (a worker not taken back holds none any more)
                        del held[task_id]
                    self.jobq.answered(ids)
            self._spread()

    def _unsent(self) -> Set[int]:
        """The ids of the tasks answered in results not sent to the master yet (kept
        while the connection to it fails)."""
        return {task_id for _, msg in self.up if bytes(msg[0]) == PoolOps.RESULTS
                for task_id in result_ids(msg[1:])}

    def resume(self) -> bool:
        """The connection to the master failed: connect again and ask the master to take
        the live workers back, each with the tasks handed to it and not answered (see
        `_resume`); the workers it does not take back are stopped. False: the master is
        gone, or takes none back (the job ends)."""
        try:
            self.selector.unregister(self.client.sock)
        except (KeyError, ValueError, OSError):
            pass
        live = [worker_id for worker_id, link in self.links.items() if link.open]
        # what the job holds as a whole (see `_jobs`): its queue, its workers' tasks and
        # those answered in results not sent yet; apart, the tasks of the workers whose
        # end the master was not told (its answer may be what was lost: then it took
        # them back already, and may have handed them out again)
        whole = list(dict.fromkeys([*self.jobq.ids(), *self._unsent(),
                                    *(task_id for held in self.held.values()
                                      for task_id in held)]))
        back = ResumeJob({worker_id: list(self.held[worker_id]) for worker_id in live}, whole,
                         {worker_id: held for worker_id, _, held in self.untold})
        try:
            again = _resume.reconnect(self.address, self.pool_name, PoolOps.RESUME_JOB,
                                      back.frames())
        except Exception:  # refused, or not in time: the master is gone for this job
            return False
        taken = set(reply_of(Kept, again[1]).worker_ids) if again is not None else set()
        if again is None or not taken:
            return False
        self.client = again[0]
        self.jobq.forget_functions()  # as the master forgot them
        self.selector.register(self.client.sock, selectors.EVENT_READ, None)
        for worker_id in live:
            if worker_id not in taken:  # its tasks went back to the master's queue
                self.links[worker_id].stopping = True  # (it takes none of the job's)
                self.jobq.answered(self.held[worker_id])
                self.held[worker_id] = {}
                self._send_to(worker_id, [PoolOps.STOP])
        untold, self.untold = self.untold, []
        for worker_id, code, _ in untold:  # (each may name a worker to fork in its place)
            self.ended(worker_id, code)  # (what it held: named in `back`)
        os.write(self.wake_w, b"x")  # a worker that ended meanwhile is reaped now
        return True

    def _reap(self) -> None:
        """Each worker that ended: what it sent last is relayed, its end told (see
        `ended`). A connection that fails meanwhile is raised once all are reaped."""
        lost = False
        ended = self._ended()
        for pid, status in ended:
            link = self.children.pop(pid)
            del self.links[link.worker_id]
            deadline = time.monotonic() + _LAST_WORDS_S  # what it sent goes first
            while link.open and readable([link.sock], deadline - time.monotonic()):
                if not self._from_worker(link, 0):
                    break
            if self.pipes is not None:  # what it wrote, before its last results
                self.pipes.drain(link.worker_id)
            try:
                self._relay()
            except ConnectionLost:  # (kept: sent once the connection is back)
                lost = True
            if link.open:
                link.open = False
                self.selector.unregister(link.sock)
            # a message not written whole never reached it: its tasks still its (not
            # given back to the master meanwhile, see `resume`) go to the others
            mine = self.held.get(link.worker_id, {})
            short = [task for end, given in link.unwritten if end > link.outbox.nbytes
                     for task in given if task[0] in mine]
            if short:
                self.jobq.take_back(link.worker_id, short, mine)
            link.outbox.close()
            link.sock.close()
            held = list(self.held.pop(link.worker_id, {}))  # (what it answered relayed)
            self.jobq.ended(link.worker_id)
            self.jobq.answered(held)
            answered = self._unsent()  # (its results, if the connection failed: sent later)
            if not self.ended(link.worker_id, os.waitstatus_to_exitcode(status),
                              [task_id for task_id in held if task_id not in answered]):
                lost = True  # (the job comes back to tell it, even with no worker left)
        if ended:
            self._spread()  # (what was taken back, to the others and those forked)
        if lost:
            raise ConnectionLost("the connection to the master failed")

    def _ended(self) -> List[Tuple[int, int]]:
        """Its workers that ended, reaped: (pid, wait status) each. Its own children only,
        each by its pid: a child that something else in the job started (a module it
        preloaded) is that code's to wait for."""
        ended = []
        for pid in list(self.children):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its status is lost
                done, status = pid, 255 << 8
            if done:
                ended.append((pid, status))
        return ended

    def serve(self, worker_ids: List[int]) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the select (the wakeup fd)
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self.forward)
        self.selector.register(self.client.sock, selectors.EVENT_READ, None)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self.wake_r)
        for worker_id in worker_ids:
            self.fork(worker_id)
        while self.children:
            try:
                self._serve_once()
            except ConnectionLost:
                if not self.resume():  # the master is gone: so is the pool, and its workers
                    for pid in self.children:
                        os.kill(pid, signal.SIGKILL)
                    return

    def _serve_once(self) -> None:
        self._from_master()
        for key, events in self.selector.select():
            if isinstance(key.data, Stream):
                assert self.pipes is not None
                self.pipes.read(key.data)
                continue
            if isinstance(key.data, _Link):
                if events & selectors.EVENT_WRITE:
                    self._to_worker(key.data)
                if events & selectors.EVENT_READ:
                    self._from_worker(key.data)
                continue
            elif key.data == self.wake_r:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
                self._reap()
        self._relay()


def group_main(address: str, pool_name: bytes, worker_ids: List[int],
               initializer: Optional[Callable[..., object]], initargs: Tuple[object, ...],
               maxtasks: Optional[int], preload: Sequence[str] = ()) -> None:
    """The target of a job of several workers: import ``preload`` (config
    ``pool_preload``: what the workers then share), fork ``worker_ids``, relay them,
    replace those that end as the master says, return once none is left."""
    _, failed, threaded = import_modules(preload)
    if failed:
        log("%s did not preload %s", current_process().name,
            ", ".join(f"{name} ({error})" for name, error in failed.items()))
    if threaded:  # its workers are forked without that thread: say so where it shows
        sys.stderr.write(f"fiber: importing {threaded!r} in {current_process().name} "
                         "started a thread, which its forked workers lack; the modules "
                         "after it were not preloaded (set pool_preload to the modules to "
                         "preload without it)\n")

    def run(worker_id: int, link: PoolLink) -> None:
        worker_main(address, pool_name, worker_id, initializer, initargs, maxtasks, link)

    client = get_client(address)
    assert isinstance(client, Client)  # a job: the master's hub is elsewhere
    _Group(address, pool_name, run, client).serve(worker_ids)
