"""The pool's service (``fiber.pool._service.PoolService``, the master's side) driven
through its handlers with no hub, for unit tests of the pool's protocol: what it calls of
its server (`Hub`), a job's process (`JobProcess`) and a map's results (`Sink`), and a
job of several made (`job_service`). The handlers are the real ones; only the socket
layer under them is not there."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from fiber.pool._protocol import (
    JOB_ID,
    PoolOps,
    pack_results,
    pack_results_of,
    unpack_tasks,
    unpack_to,
)
from fiber.pool._service import PoolService, Task, WorkerState
from fiber.pool._state import PoolJob
from fiber.transport.peers import Peer

__all__ = ["Hub", "JobProcess", "Sink", "handed_to_job", "job_service", "relay_results",
           "tasks_of"]


class JobProcess:
    """What the service reads of a job's `fiber.Process` (``kind``: a job of several
    workers, or of one, named as its worker)."""

    def __init__(self, n: int, kind: str = "PoolJob") -> None:
        self.name = f"{kind}-{n}"
        self.job_id = f"1-{n}"
        self.host = "here"
        self.exit_reason = ""
        self.cancelled = False
        self.exitcode: Optional[int] = None


class Hub:
    """What the service calls of its server: what it sends (``sent``: peer and frames),
    its timers and its replies (status and payload), kept in order."""

    def __init__(self) -> None:
        self.sent: List[Tuple[Any, List[Any]]] = []
        self.timers: List[Any] = []
        self.replies: List[Any] = []

    def send(self, peer: Any, frames: List[Any]) -> bool:
        self.sent.append((peer, frames))
        return True

    def call_later(self, delay: float, fn: Any) -> None:
        self.timers.append((delay, fn))

    def reply(self, peer: Any, req_id: bytes, status: bytes, payload: Any = ()) -> bool:
        self.replies.append((status, list(payload)))
        return True

    def end_peer(self, peer_id: int, abort: bool = False) -> None:
        raise AssertionError("no peer is ended here")


class Sink:
    """A map's results: the indexes delivered, in order."""

    def __init__(self) -> None:
        self.got: List[int] = []

    def deliver(self, index: int, ok: bool, frames: Sequence[Any]) -> None:
        self.got.append(index)


def job_service(workers: int) -> Tuple[PoolService, Hub, PoolJob, List[WorkerState]]:
    """A service whose pool is one job of ``workers`` (ids 10, 11, ...) that forks them
    (its tasks handed to it as a whole), none connected yet; function 1 known."""
    service = PoolService(b"pool", 2, None, 3, lambda ws, expected: None)
    hub = Hub()
    service.server = hub  # type: ignore[assignment]
    service.functions[1] = [b"f"]
    process = JobProcess(1)
    job = PoolJob(process, forks=True)  # type: ignore[arg-type]
    states = [WorkerState(10 + i, process, f"PoolWorker-{10 + i}", job)  # type: ignore[arg-type]
              for i in range(workers)]
    for ws in states:
        service.add_worker(ws)
    return service, hub, job, states


def tasks_of(sink: Sink, args: Sequence[bytes]) -> List[Task]:
    """A map's tasks of function 1, ids 1, 2, ..., one argument frame each."""
    return [Task(i + 1, sink, i, 1, [arg], "map(f)") for i, arg in enumerate(args)]


def handed_to_job(hub: Hub) -> List[int]:
    """The ids of the tasks the job was sent, as its own (``JOB_ID``), since last asked."""
    ids = []
    for _, frames in hub.sent:
        for wid, body in unpack_to(frames[2:]):
            if wid == JOB_ID and bytes(body[0]) in (PoolOps.TASKS, PoolOps.ALONE):
                ids += [t[0] for t in unpack_tasks(list(body[1:]))]
    hub.sent.clear()
    return ids


def relay_results(service: PoolService, hub: Hub, peer: Peer,
                  ran: List[Tuple[int, List[int]]]) -> None:
    """The job relays its workers' results (``ran``: worker id and the ids of the tasks
    it answered) as `fiber.pool._group` does: one ``results_of`` message."""
    service.results_of(hub, peer, b"", pack_results_of([  # type: ignore[arg-type]
        (wid, [PoolOps.RESULTS, *pack_results([(i, True, [b"r"]) for i in ids], 0.001)])
        for wid, ids in ran]))
