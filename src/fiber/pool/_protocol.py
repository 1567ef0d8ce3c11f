"""What a pool's master and its workers (or their jobs) say to each other: the operations
and the packed layouts of tasks, results and relayed messages. The wire, drawn:
docs/contributing/pools.md, "The wire"."""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, TypeVar

from ..transport.serialization import Frame

__all__ = ["PoolOps", "pack_task", "pack_tasks", "unpack_tasks", "task_ids", "pack_results",
           "unpack_results", "result_ids", "results_busy", "pack_to", "unpack_to",
           "split_results", "pack_results_of", "unpack_results_of", "pack_ids",
           "unpack_ids", "WorkerHello", "InitFailed", "Retiring", "Resume", "WorkerEnded",
           "Replacement", "ResumeJob", "Kept", "JOB_ID"]


class PoolOps:
    """The pool protocol's operations: a worker's messages to its pool's service (no
    reply but to ``init_failed``), and the master's messages pushed on a worker's
    connection (see above)."""

    HELLO = b"hello"  # worker -> master: connected, initializer done
    INIT_FAILED = b"init_failed"  # worker -> master: the initializer raised
    RESULTS = b"results"  # worker -> master: a batch of results
    TASKS = b"tasks"  # master -> worker: a batch of tasks
    STOP = b"stop"  # master -> worker: finish what you hold, then exit
    RETIRING = b"retiring"  # worker -> master: the cluster told it to go (see _retire)
    RESUME = b"resume"  # worker -> master: its connection was reset; it is back (_resume)
    WORKER_ENDED = b"worker_ended"  # job -> master: one of its workers ended (_group)
    FROM = b"from"  # job -> master: workers' hellos, relayed (_group)
    RESULTS_OF = b"results_of"  # job -> master: its workers' results, one header (_group)
    TO = b"to"  # master -> job: a worker's tasks or stop, to relay (_group)
    RESUME_JOB = b"resume_job"  # job -> master: its connection was reset; back (_group)
    # master -> job, in a ``to`` message under `JOB_ID` (a job handed tasks as a whole):
    # ``tasks`` for its own queue, ``alone`` tasks each to run alone on an idle worker,
    # and ``credit``: how many tasks each of its workers may hold from now on
    ALONE = b"alone"
    CREDIT = b"credit"


#: The id under which a ``to`` message carries tasks for the job itself, which hands them
#: to its workers (no worker's id is 0).
JOB_ID = 0


# -- a worker's small requests, as records (see fiber.transport.operations) -------------------
# (a worker id goes as u64 little-endian; the batches below are packed layouts of their own)

def _worker_id(frame: Frame) -> int:
    return int.from_bytes(frame, "little")


class WorkerHello(NamedTuple):
    """``hello``, sent by a worker of its own job (a relayed one's carries no payload:
    its id is its ``from`` message's)."""

    worker_id: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> WorkerHello:
        return cls(_worker_id(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.worker_id.to_bytes(8, "little")]


class InitFailed(NamedTuple):
    """``init_failed``: the traceback of the worker's initializer."""

    error: str
    worker_id: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> InitFailed:
        return cls(bytes(payload[0]).decode(errors="replace"), _worker_id(payload[1]))

    def frames(self) -> List[Frame]:
        return [self.error.encode(), self.worker_id.to_bytes(8, "little")]


class Retiring(NamedTuple):
    """``retiring``: the signal by which the worker's cluster told it to go, and the
    ids of the tasks it took (running, or results not sent yet)."""

    worker_id: int
    signum: int
    taken: List[int]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Retiring:
        return cls(_worker_id(payload[0]), int(bytes(payload[1])), unpack_ids(payload[2]))

    def frames(self) -> List[Frame]:
        return [self.worker_id.to_bytes(8, "little"), b"%d" % self.signum,
                pack_ids(self.taken)]


class Resume(NamedTuple):
    """``resume``: a worker whose connection was reset, with the ids of the tasks it
    holds or has unsent results of (see `_resume`)."""

    worker_id: int
    held: List[int]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Resume:
        return cls(_worker_id(payload[0]), unpack_ids(payload[1]))

    def frames(self) -> List[Frame]:
        return [self.worker_id.to_bytes(8, "little"), pack_ids(self.held)]


class WorkerEnded(NamedTuple):
    """``worker_ended``: a worker of a job of several ended with ``code`` (see `_group`),
    holding the tasks ``held`` (their ids: handed to it, not answered)."""

    worker_id: int
    code: int
    held: Sequence[int] = ()

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> WorkerEnded:
        held = tuple(unpack_ids(payload[2])) if len(payload) > 2 else ()
        return cls(_worker_id(payload[0]), int(bytes(payload[1])), held)

    def frames(self) -> List[Frame]:
        return [self.worker_id.to_bytes(8, "little"), str(self.code).encode(),
                pack_ids(list(self.held))]


class Replacement(NamedTuple):
    """The ``ok`` answer to a `WorkerEnded`: the id of the worker the job forks in the
    ended one's place, or None (an empty frame: none needed)."""

    worker_id: Optional[int]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Replacement:
        frame = payload[0] if payload else b""
        if len(frame) not in (0, 8):
            raise ValueError(f"a worker id of 8 bytes, not {len(frame)}")
        return cls(_worker_id(frame) if frame else None)

    def frames(self) -> List[Frame]:
        wid = self.worker_id
        return [b"" if wid is None else wid.to_bytes(8, "little")]


_ENDED = b"ended"  # (`ResumeJob`) the second frame of a worker that ended


class ResumeJob(NamedTuple):
    """``resume_job``: a job of several whose connection was reset, naming each of its
    live workers with the ids of the tasks handed to it and not answered (``held``),
    the ids of all the tasks the job holds as a whole (``whole``, see `_jobs`), and each
    worker that ended while the master could not be told, with the tasks it held
    (``ended``: not in ``whole``; its end is told again, holding none). A ``to`` layout
    (`pack_to`): one frame of ids (`pack_ids`) a worker, a second frame ``ended`` for one
    that ended, then the job's own under `JOB_ID`."""

    held: Dict[int, List[int]]
    whole: List[int]
    ended: Mapping[int, List[int]] = {}  # (read only: one dict for every default)

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> ResumeJob:
        held: Dict[int, List[int]] = {}
        ended: Dict[int, List[int]] = {}
        for worker_id, frames in unpack_to(payload):
            ids = unpack_ids(frames[0])
            if len(frames) > 1 and bytes(frames[1]) == _ENDED:
                ended[worker_id] = ids
            else:
                held[worker_id] = ids
        return cls(held, held.pop(JOB_ID, []), ended)

    def frames(self) -> List[Frame]:
        return pack_to([(worker_id, [pack_ids(ids)]) for worker_id, ids in self.held.items()]
                       + [(worker_id, [pack_ids(ids), _ENDED])
                          for worker_id, ids in self.ended.items()]
                       + [(JOB_ID, [pack_ids(self.whole)])])


class Kept(NamedTuple):
    """The ``ok`` answer to a ``resume_job``: the ids of the job's workers the master
    takes back (`pack_ids`)."""

    worker_ids: List[int]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Kept:
        return cls(unpack_ids(payload[0]))

    def frames(self) -> List[Frame]:
        return [pack_ids(self.worker_ids)]


_TASK = struct.Struct("<QIBH")

#: Functions a worker keeps, least recently used first out (same on both sides).
FUNCTION_SLOTS = 32
_V = TypeVar("_V")


def remember(lru: Dict[int, _V], fid: int, value: _V) -> None:
    """Use (or add) function ``fid`` in ``lru``, a dict in use order (oldest first), and
    drop the oldest past `FUNCTION_SLOTS`: the master, a job and a worker keep their
    function LRUs so, alike. (A dict, not an OrderedDict: a dict of ints to None, the
    master's a worker, is not tracked by the garbage collector.)"""
    lru.pop(fid, None)
    lru[fid] = value
    while len(lru) > FUNCTION_SLOTS:
        del lru[next(iter(lru))]

_RESULT = struct.Struct("<QBH")
_BUSY = struct.Struct("<d")
_ONE_RESULT = _BUSY.size + _RESULT.size
_BUSY_RESULT = struct.Struct("<dQBH")  # the usual batch's header, read at once

#: One task on the wire: (task_id, function_id, function frames or None, argument frames).
WireTask = Tuple[int, int, Any, Sequence[Any]]


def pack_task(task_id: int, fid: int, arg_frames: Sequence[Frame]) -> List[Frame]:
    """``[TASKS, *payload]`` of the usual batch: one task, whose function the worker
    keeps (what `pack_tasks` packs for it, without the batch's tuples and loop)."""
    return [PoolOps.TASKS, _TASK.pack(task_id, fid, False, len(arg_frames)), *arg_frames]


def pack_tasks(tasks: Sequence[WireTask]) -> List[Frame]:
    if len(tasks) == 1 and tasks[0][2] is None:  # the usual batch: one task, no function
        task_id, fid, _, arg_frames = tasks[0]
        return pack_task(task_id, fid, arg_frames)[1:]
    header = bytearray()
    frames: List[Frame] = []
    for task_id, fid, fn_frames, arg_frames in tasks:
        if fn_frames is not None:
            frames.append(struct.pack("<H", len(fn_frames)))
            frames.extend(fn_frames)
        frames.extend(arg_frames)
        header += _TASK.pack(task_id, fid, fn_frames is not None, len(arg_frames))
    return [bytes(header), *frames]


def unpack_tasks(frames: Sequence[Frame]) -> List[WireTask]:
    """The tasks of a batch (a list, not a generator: the usual batch is one task, which
    a generator costs two resumptions more)."""
    header = frames[0]
    pos = 1
    out: List[WireTask] = []
    for offset in range(0, len(header), _TASK.size):
        task_id, fid, has_fn, n = _TASK.unpack_from(header, offset)
        fn_frames = None
        if has_fn:
            (k,) = struct.unpack("<H", frames[pos])
            fn_frames = list(frames[pos + 1:pos + 1 + k])
            pos += 1 + k
        out.append((task_id, fid, fn_frames, list(frames[pos:pos + n])))
        pos += n
    return out


def task_ids(frames: Sequence[Frame]) -> List[int]:
    """The ids of the tasks of a batch (``TASKS``), from its header alone."""
    return [fields[0] for fields in _TASK.iter_unpack(frames[0])]


def pack_results(results: Sequence[Tuple[int, bool, Sequence[Frame]]],
                 busy: float) -> List[Frame]:
    header = bytearray(_BUSY.pack(busy))
    frames: List[Frame] = []
    for task_id, ok, result_frames in results:
        header += _RESULT.pack(task_id, ok, len(result_frames))
        frames.extend(result_frames)
    return [bytes(header), *frames]


def results_busy(frames: Sequence[Frame]) -> float:
    """Seconds the worker spent running the tasks of a results batch."""
    return float(_BUSY.unpack_from(frames[0])[0])


def unpack_results(frames: Sequence[Frame]) -> List[Tuple[int, bool, List[Frame]]]:
    """The results of a batch (a list: see `unpack_tasks`)."""
    header = frames[0]
    if len(header) == _ONE_RESULT:  # the usual batch: no iterator, no view
        task_id, ok, n = _RESULT.unpack_from(header, _BUSY.size)
        return [(task_id, ok == 1, [frames[1]] if n == 1 else list(frames[1:1 + n]))]
    pos = 1
    out: List[Tuple[int, bool, List[Frame]]] = []
    for task_id, ok, n in _RESULT.iter_unpack(memoryview(header)[_BUSY.size:]):
        # a result is usually one frame: a list of it costs a third of a slice's
        out.append((task_id, ok == 1, [frames[pos]] if n == 1 else list(frames[pos:pos + n])))
        pos += n
    return out


def result_ids(frames: Sequence[Frame]) -> List[int]:
    """The ids of the tasks of a batch of results (``RESULTS``), from its header."""
    return [fields[0] for fields in _RESULT.iter_unpack(memoryview(frames[0])[_BUSY.size:])]


def pack_ids(ids: Sequence[int]) -> bytes:
    """Ids (of tasks, of workers), u64 each."""
    return struct.pack(f"<{len(ids)}Q", *ids)


def unpack_ids(data: Frame) -> List[int]:
    """What `pack_ids` packed."""
    return [fields[0] for fields in _ID.iter_unpack(data)]


_ID = struct.Struct("<Q")
_TO = struct.Struct("<QI")


def pack_to(messages: Sequence[Tuple[int, Sequence[Frame]]]) -> List[Frame]:
    """The frames of a ``to`` message after its op: ``messages`` are (worker id,
    ``[op, *payload]``) for workers of one job."""
    out: List[Frame] = [b"".join([_TO.pack(worker_id, len(frames))
                                   for worker_id, frames in messages])]
    for _, frames in messages:
        out.extend(frames)
    return out


def unpack_to(frames: Sequence[Frame]) -> List[Tuple[int, Sequence[Frame]]]:
    """What `pack_to` packed: (worker id, ``[op, *payload]``) each."""
    out = []
    at = 1
    for worker_id, n in _TO.iter_unpack(bytes(frames[0])):
        out.append((worker_id, frames[at:at + n]))
        at += n
    return out


# -- a job's relayed results: one header for all its workers' batches ---------------------------

_OF = struct.Struct("<QH")  # a worker's id, the length of its batch's header

#: A worker's relayed batch of results: (worker id, busy seconds, [(task id, ok, frames)]).
RelayedResults = Tuple[int, float, List[Tuple[int, bool, List[Frame]]]]


_Message = TypeVar("_Message", bound=Tuple[int, Sequence[Any]])


def split_results(messages: Sequence[_Message]) -> Tuple[List[_Message], List[_Message]]:
    """A job's messages from its workers, (worker id, ``[op, *payload]``) each, as those
    it relays in a ``from`` message (hellos) and the batches of results it relays in a
    ``results_of`` message, each kept in its order. The ``from`` message goes first: a
    worker's hello comes before its results, and nothing a worker says follows them."""
    said: List[_Message] = []
    results: List[_Message] = []
    for message in messages:
        (results if message[1][0] == PoolOps.RESULTS else said).append(message)
    return said, results


def pack_results_of(batches: Sequence[Tuple[int, Sequence[Frame]]]) -> List[Frame]:
    """The frames of a ``results_of`` message after its op: ``batches`` are (worker id,
    ``[RESULTS, header, *result frames]``), as the job's workers sent them. One header
    (each worker's id and its batch's header, as is) and every result frame: the master
    reads N + 1 frames for N one-frame results, where ``from`` took 3N + 1."""
    header = bytearray()
    out: List[Frame] = [b""]
    for worker_id, message in batches:
        head = message[1]
        header += _OF.pack(worker_id, len(head))
        header += head
        out.extend(message[2:])
    out[0] = bytes(header)
    return out


def unpack_results_of(frames: Sequence[Frame]) -> List[RelayedResults]:
    """What `pack_results_of` packed: each worker's batch, as `unpack_results` and
    `results_busy` read it.

    Raises:
        ValueError, struct.error, IndexError: ``frames`` are not such a message.
    """
    header = frames[0]
    end = len(header)
    at, pos = 0, 1
    out: List[RelayedResults] = []
    while at < end:
        worker_id, size = _OF.unpack_from(header, at)
        at += _OF.size
        if size == _ONE_RESULT:  # the usual batch: one result of one frame
            busy, task_id, ok, n = _BUSY_RESULT.unpack_from(header, at)
            out.append((worker_id, busy, [(task_id, ok == 1, [frames[pos]] if n == 1
                                           else list(frames[pos:pos + n]))]))
            pos += n
        else:
            (busy,) = _BUSY.unpack_from(header, at)
            results = []
            for offset in range(at + _BUSY.size, at + size, _RESULT.size):
                task_id, ok, n = _RESULT.unpack_from(header, offset)
                results.append((task_id, ok == 1, [frames[pos]] if n == 1
                                else list(frames[pos:pos + n])))
                pos += n
            out.append((worker_id, busy, results))
        at += size
    if at != end or pos != len(frames):
        raise ValueError("a results_of message whose header does not match its frames")
    return out
