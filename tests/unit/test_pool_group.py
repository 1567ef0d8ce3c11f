"""The job's side of a job of several workers (``fiber.pool._group``) when its connection
to the master is reset while its workers run, answer and end: what it keeps, what it
names in ``resume_job``, and that every result still comes once.

The job is the real `_Group`, its workers real processes it forks (each a script that
speaks the worker's side of the relay: hello, results, stop), its master the real
service's handlers (`fiber_ci.pool_service`, no hub). Between the two, in place of the
TCP connection, `_Master` hands each message to its handler at once, and is cut when a
test says so: what the test controls is the order in which the job learns of each event,
which a real connection leaves to chance (the netns reset tests run that by chance)."""

from __future__ import annotations

import gc
import os
import signal
import socket
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import pytest

from fiber.pool import _resume
from fiber.pool._group import _Group
from fiber.pool._protocol import (
    JOB_ID,
    PoolOps,
    ResumeJob,
    WorkerEnded,
    WorkerHello,
    pack_results,
    unpack_tasks,
    unpack_to,
)
from fiber.pool._service import PoolService
from fiber.pool._worker import PoolLink
from fiber.transport.client import ConnectionLost
from fiber.transport.peers import Peer
from fiber.transport.sockets import readable

from fiber_ci.pool_service import Hub, Sink, job_service, tasks_of

#: A task's argument says what the worker does with it: answer it (``ok``), answer it
#: and end (``end``, exit code 0), or end without answering if it is the first task the
#: worker was given (``die``, exit code 3; a later one it answers: a task run again).
DIE_CODE = 3


def _scripted(worker_id: int, link: PoolLink) -> None:
    """A worker (forked by the job): hello, then each task as its argument says."""
    link.send(b"pool", PoolOps.HELLO, WorkerHello(worker_id).frames())
    first = True
    while True:
        msg = link.next_push(None)
        assert msg is not None
        if msg[1] == PoolOps.STOP:
            return
        for task_id, _, _, args in unpack_tasks(msg[2:]):
            what = bytes(args[0])
            if what == b"die" and first:
                os._exit(DIE_CODE)
            first = False
            link.send(b"pool", PoolOps.RESULTS,
                      pack_results([(task_id, True, [b"r%d" % task_id])], 0.001))
            if what == b"end":
                return


class _Master:
    """The job's connection as `_Group` uses it, its far end the service's handlers on
    ``peer``: what the job sends is handled at once, what the service sent ``peer`` comes
    back as the job's pushes. ``cut()`` makes it fail as a reset connection does: the
    job's next call raises, the service learns of a reset, and what was in flight to
    the job is lost."""

    def __init__(self, service: PoolService, hub: Hub, peer: Peer) -> None:
        self.service, self.hub, self.peer = service, hub, peer
        self.sock, self._far = socket.socketpair()  # (registered by the job's selector)
        self.up = True
        self.lose_answer = False  # the next request is handled, its answer lost

    def cut(self) -> None:
        self.up = False
        self.hub.sent = [(p, f) for p, f in self.hub.sent if p is not self.peer]
        self.peer.reset = True
        self.service.peer_gone(self.hub, self.peer)  # type: ignore[arg-type]

    def _check(self) -> None:
        if not self.up:
            raise ConnectionLost("reset")

    def send(self, service: bytes, op: bytes, frames: Sequence[Any] = ()) -> None:
        self._check()
        handler = {PoolOps.FROM: self.service.from_workers,
                   PoolOps.RESULTS_OF: self.service.results_of}[bytes(op)]
        handler(self.hub, self.peer, b"", list(frames))  # type: ignore[arg-type]

    def request(self, service: bytes, op: bytes, frames: Sequence[Any] = (),
                timeout: Optional[float] = None) -> Tuple[bytes, List[Any]]:
        self._check()
        assert bytes(op) == PoolOps.WORKER_ENDED, op
        self.service.worker_ended(self.hub, self.peer, b"r",  # type: ignore[arg-type]
                                  WorkerEnded.decode(list(frames)))
        status, payload = self.hub.replies.pop()
        if self.lose_answer:
            self.lose_answer = False
            self.cut()
            raise ConnectionLost("reset before the answer came")
        return status, payload

    def next_push(self, timeout: Optional[float], spin: float = 0.0) -> Optional[List[Any]]:
        self._check()
        for i, (peer, frames) in enumerate(self.hub.sent):
            if peer is self.peer:
                del self.hub.sent[i]
                return frames
        return None

    def close(self) -> None:
        self.sock.close()
        self._far.close()


class _Job:
    """A job of two workers (10 and 11) forked by a real `_Group`, both connected to the
    service through it; ``resumed``: the `ResumeJob` it sent each time it came back."""

    def __init__(self, monkeypatch: Any) -> None:
        self.service, self.hub, self.job, self.states = job_service(2)
        self.masters = [_Master(self.service, self.hub, Peer(7, b"p" * 16, False, None))]
        self.resumed: List[ResumeJob] = []
        monkeypatch.setattr(_resume, "reconnect", self._reconnect)
        self.group = _Group("", b"pool", _scripted, self.masters[0])  # type: ignore[arg-type]
        self.sink = Sink()

    def start(self) -> None:
        """Fork the workers; wait until both are connected through the job."""
        for ws in self.states:
            self.group.fork(ws.worker_id)
        for ws in self.states:
            self.read(ws.worker_id)  # its hello
        self.group._relay()
        assert all(ws.connected for ws in self.states)

    def _reconnect(self, address: str, pool_name: bytes, op: bytes,
                   frames: Sequence[Any]) -> Optional[Tuple[_Master, List[Any]]]:
        """`_resume.reconnect`: a new connection, on which the service answers."""
        assert bytes(op) == PoolOps.RESUME_JOB
        msg = ResumeJob.decode(list(frames))
        self.resumed.append(msg)
        master = _Master(self.service, self.hub, Peer(8, b"q" * 16, False, None))
        self.masters.append(master)
        self.service.resume_job(self.hub, master.peer, b"", msg)  # type: ignore[arg-type]
        status, payload = self.hub.replies.pop()
        return (master, payload) if status == b"ok" else None

    def submit(self, *args: bytes) -> Dict[int, int]:
        """A map of one task an argument, handed to the job and by it to its workers:
        which worker holds each task (by task id)."""
        self.tasks = tasks_of(self.sink, args)
        self.service.submit(self.tasks)
        self.group._from_master()
        return {task_id: worker_id for worker_id, held in self.group.held.items()
                for task_id in held}

    def read(self, worker_id: int, count: int = 1) -> None:
        """Wait until the job has read ``count`` more messages of ``worker_id``."""
        link = self.group.links[worker_id]
        want = self._read_from(worker_id) + count
        deadline = time.monotonic() + 10
        while self._read_from(worker_id) < want:
            assert time.monotonic() < deadline, f"worker {worker_id} sent nothing"
            if readable([link.sock], 0.1):
                self.group._from_worker(link)

    def _read_from(self, worker_id: int) -> int:
        """Messages of ``worker_id`` the job holds, not relayed yet."""
        return sum(1 for wid, _ in self.group.up if wid == worker_id)

    def wait_sent(self, worker_id: int) -> None:
        """Wait until what ``worker_id`` sent can be read (without reading it)."""
        assert readable([self.group.links[worker_id].sock], 10), worker_id

    def wait_exit(self, worker_id: int) -> None:
        """Wait until ``worker_id``'s process has ended (not reaped: the job reaps it)."""
        pid = self.pid(worker_id)
        deadline = time.monotonic() + 10
        while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            assert time.monotonic() < deadline, f"worker {worker_id} did not end"
            time.sleep(0.01)

    def pid(self, worker_id: int) -> int:
        (pid,) = [pid for pid, link in self.group.children.items()
                  if link.worker_id == worker_id]
        return pid

    def handed(self) -> List[int]:
        """The ids of the tasks the service sent the job since it last came back."""
        ids = []
        for _, frames in self.hub.sent:
            for wid, body in unpack_to(frames[2:]):
                if wid == JOB_ID and bytes(body[0]) in (PoolOps.TASKS, PoolOps.ALONE):
                    ids += [t[0] for t in unpack_tasks(list(body[1:]))]
        return ids

    def close(self) -> None:
        for pid in list(self.group.children):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        for link in self.group.links.values():
            link.sock.close()
        for master in self.masters:
            master.close()
        os.close(self.group.wake_r)
        os.close(self.group.wake_w)
        self.group.selector.close()
        gc.unfreeze()  # (the job froze the collector's objects before each fork)


@pytest.fixture
def job(monkeypatch: Any) -> Iterator[_Job]:
    made = _Job(monkeypatch)
    try:
        made.start()
        yield made
    finally:
        made.close()


def test_a_worker_that_answers_and_ends_while_the_connection_is_down_is_named_holding_none(
        job: _Job) -> None:
    """A worker answers its task and ends, its job's connection reset meanwhile: the job
    reaps it, keeps its result (unsent), and comes back naming it as ended holding
    nothing (its task under the job's whole list, answered), its sibling's task as the
    sibling's; then tells its end and sends both results. Each task's result comes once
    and nothing runs again."""
    holds = job.submit(b"end", b"ok")
    ender, other = holds[1], holds[2]
    assert ender != other
    job.wait_exit(ender)
    job.wait_sent(other)
    job.masters[0].cut()
    job.read(other)
    with pytest.raises(ConnectionLost):
        job.group._reap()
    assert job.group.untold == [(ender, 0, [])] and job.group._unsent() == {1, 2}
    assert job.group.resume()
    (back,) = job.resumed
    assert back.held == {other: [2]} and sorted(back.whole) == [1, 2]
    assert dict(back.ended) == {ender: []}
    job.group._relay()
    assert sorted(job.sink.got) == [0, 1] and job.service.outstanding == 0
    assert job.service.retried == 0 and job.handed() == []


def test_a_workers_end_whose_answer_was_lost_is_told_again_and_its_task_runs_once_more(
        job: _Job) -> None:
    """A worker dies holding its task; the job tells the master, which takes the task
    back and hands it to the job again, but the answer and that task are lost to a
    reset. The job comes back naming the worker as ended, holding that task, tells its
    end again holding none, and its other worker runs the task: one result each, the
    task charged to the dead worker once."""
    holds = job.submit(b"die", b"ok")
    dier, other = holds[1], holds[2]
    job.read(other)
    job.group._relay()
    assert job.sink.got == [1]
    job.wait_exit(dier)
    job.masters[0].lose_answer = True
    with pytest.raises(ConnectionLost):  # told, and its answer lost with the connection
        job.group._reap()
    assert job.group.untold == [(dier, DIE_CODE, [1])]
    assert job.group.resume()
    (back,) = job.resumed
    assert back.held == {other: []} and dict(back.ended) == {dier: [1]}
    assert job.handed() == [1]  # lost in flight: handed out again
    job.group._from_master()
    assert job.group.held[other] == {1: None}
    job.read(other)
    job.group._relay()
    assert sorted(job.sink.got) == [0, 1] and job.service.outstanding == 0
    assert job.service.retried == 1 and not job.service.queue
    assert [ws.worker_id for ws in job.tasks[0].attempts] == [dier]


def test_a_worker_the_master_did_not_keep_is_stopped_and_takes_none_of_the_jobs_tasks(
        job: _Job) -> None:
    """Both workers answer while the connection is reset; the master gives one up
    meanwhile. The job comes back naming both; the master keeps one: the job stops the
    other, which takes none of the job's tasks after, and its task goes back to the
    master and comes to the job again. Its first result (sent late) answers it, the
    second run's is dropped: one result a task."""
    holds = job.submit(b"ok", b"ok")
    assert sorted(holds.values()) == [10, 11]
    for worker_id in set(holds.values()):
        job.wait_sent(worker_id)
    job.masters[0].cut()
    given_up = job.states[1]
    job.service.worker_lost(given_up)
    kept = job.states[0].worker_id
    assert job.group.resume()
    (back,) = job.resumed
    assert sorted(back.held) == [10, 11] and sorted(back.whole) == [1, 2]
    link = job.group.links[given_up.worker_id]
    assert link.stopping and job.group.held[given_up.worker_id] == {}
    for worker_id in (10, 11):
        job.read(worker_id)
    job.group._relay()
    again = job.handed()  # (the given-up worker's task, back to the job)
    assert again == [task_id for task_id, wid in holds.items() if wid == given_up.worker_id]
    job.group._from_master()  # the copy goes to the kept worker only
    assert set(job.group.held[kept]) == set(again) and job.group.held[given_up.worker_id] == {}
    job.read(kept)
    job.group._relay()
    assert sorted(job.sink.got) == [0, 1] and job.service.outstanding == 0
    job.wait_exit(given_up.worker_id)  # stopped: it ended of itself
    pid = job.pid(given_up.worker_id)
    _, status = os.waitpid(pid, 0)
    del job.group.children[pid]  # (reaped here: not the job's to reap, nor to kill)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_job_whose_last_workers_die_while_its_connection_is_down_tells_their_ends(
        job: _Job) -> None:
    """Both workers die holding their tasks while the job's connection is reset, with no
    result waiting to be relayed: the job used to keep their ends untold and, with no
    worker left, exit without coming back. The master then gave the job's record to one
    of them: both tasks charged to one worker, as suspects. It comes back, names each
    worker's end with its own task, and ends (the master keeps none of its workers)."""
    holds = job.submit(b"die", b"die")
    assert sorted(holds.values()) == [10, 11]
    for worker_id in (10, 11):
        job.wait_exit(worker_id)
    job.masters[0].cut()
    with pytest.raises(ConnectionLost):
        job.group._reap()
    assert not job.group.children
    assert not job.group.resume()  # (it ends: no worker of its own left)
    (back,) = job.resumed
    assert dict(back.ended) == {wid: [tid] for tid, wid in holds.items()}
    assert {t.task_id: [ws.worker_id for ws in t.attempts] for t in job.tasks} == {
        tid: [wid] for tid, wid in holds.items()}
    assert not any(t.suspect for t in job.tasks) and job.service.retried == 2


def test_a_task_the_job_hands_a_worker_dead_but_not_reaped_yet_goes_to_another_uncharged(
        job: _Job) -> None:
    """An idle worker is SIGKILLed; before the job has seen its end (its pair's EOF, its
    SIGCHLD), the master hands the job a task, which the job gives its least loaded
    worker: the dead one. The send fails (its end of the pair is closed): the task goes
    to the other worker, and the dead one's end names none. It used to name the task,
    which the master charged to that end: a task that never ran failed
    (`pool_max_task_retries=0`) or became a suspect."""
    dead, other = (ws.worker_id for ws in job.states)
    os.kill(job.pid(dead), signal.SIGKILL)
    job.wait_exit(dead)
    assert job.submit(b"ok") == {1: other}
    assert job.group.links[dead].open  # (its end not seen yet)
    job.group._reap()
    assert dead not in job.group.links
    job.read(other)
    job.group._relay()
    assert job.sink.got == [0] and job.service.outstanding == 0
    assert job.service.retried == 0 and not job.tasks[0].attempts


def test_a_task_whose_message_the_job_had_not_written_whole_when_its_worker_died_is_not_charged(
        job: _Job) -> None:
    """A task too large for the socket pair's buffer is written to its worker in part;
    the rest waits in the job's outbox until the worker reads. The worker is SIGKILLed
    before it read the whole message: it never ran the task, which goes to the other
    worker when the job reaps it, and its end names none. It used to name the task,
    which the master charged to that end (`pool_max_task_retries=0`: a task that never
    ran failed; else a suspect, run alone)."""
    first, other = (ws.worker_id for ws in job.states)
    big = b"x" * (8 << 20)  # (far more than a socket pair's send buffer)
    assert job.submit(big) == {1: first}  # (both idle: the first in order)
    assert job.group.links[first].outbox.items  # written in part
    os.kill(job.pid(first), signal.SIGKILL)
    job.wait_exit(first)
    job.group._reap()
    assert first not in job.group.links and 1 in job.group.held[other]
    link = job.group.links[other]
    deadline = time.monotonic() + 10
    while link.outbox.items:  # (what the job's select loop does as the worker reads)
        assert time.monotonic() < deadline, "the other worker did not read its task"
        job.group._to_worker(link)
        time.sleep(0.01)
    job.read(other)
    job.group._relay()
    assert job.sink.got == [0] and job.service.outstanding == 0
    assert job.service.retried == 0 and not job.tasks[0].attempts
