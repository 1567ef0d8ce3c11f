"""A job's own queue of tasks (a job of several handed tasks as a whole, see `_jobs`).

The master sends the job tasks under `JOB_ID`, with no worker named; the job's group
(`_group`) keeps them here and hands each to the least-loaded of its workers that may
take one, at most ``depth`` a worker (half the credit the master names, at least two: a
worker holds its next task while it runs one, and what the job holds beyond that goes to
whichever worker is free first). A task flagged ``alone`` (a suspect: it may kill its
worker) goes only to a worker holding nothing, and that worker gets nothing more until
it answers. The functions: the job keeps those the master sent it, least recently used
out, as the master counts them (`FUNCTION_SLOTS`), and sends each worker a function's
frames with its first task of it, as the master does for a worker of its own.
"""

from __future__ import annotations

import collections
from typing import Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..transport.serialization import Frame
from ._protocol import PoolOps, WireTask, pack_tasks, remember, unpack_tasks

__all__ = ["JobQueue", "Queued", "depth_of"]

#: A queued task: (task id, function id, the function's frames, argument frames, alone).
Queued = Tuple[int, int, Sequence[Frame], Sequence[Frame], bool]


def depth_of(credit: int) -> int:
    """How many tasks a worker of a job holds when the master's credit is ``credit``:
    the credit covers a round trip to the master; the job's own is a local socket's."""
    return credit if credit <= 2 else max(2, (credit + 1) // 2)


class JobQueue:
    """The tasks a job holds and has not handed to a worker, and what it needs to."""

    def __init__(self) -> None:
        self.queue: Deque[Queued] = collections.deque()
        self.depth = 1
        #: The functions the master counts the job as keeping: id -> frames.
        self._functions: Dict[int, Sequence[Frame]] = {}
        #: Each worker's functions, as it keeps them: worker id -> its LRU.
        self._known: Dict[int, Dict[int, None]] = {}
        #: The tasks running alone (ids), each on a worker that takes nothing else.
        self.alone: Set[int] = set()

    def received(self, frames: Sequence[Frame]) -> None:
        """A ``to`` message's part for the job itself: ``[op, *payload]``."""
        op = bytes(frames[0])
        if op == PoolOps.CREDIT:
            self.depth = depth_of(int(bytes(frames[1])))
            return
        alone = op == PoolOps.ALONE
        for task_id, fid, fn_frames, arg_frames in unpack_tasks(frames[1:]):
            if fn_frames is None:
                fn_frames = self._functions[fid]
            remember(self._functions, fid, fn_frames)
            self.queue.append((task_id, fid, fn_frames, arg_frames, alone))

    def forget_functions(self) -> None:
        """The master forgot which functions the job keeps (its connection was reset):
        so does the job (the tasks queued keep their own)."""
        self._functions.clear()

    def ended(self, worker_id: int) -> None:
        """Worker ``worker_id`` is gone: its functions with it."""
        self._known.pop(worker_id, None)

    def ids(self) -> List[int]:
        """The ids of the tasks queued."""
        return [entry[0] for entry in self.queue]

    def answered(self, task_ids: Iterable[int]) -> None:
        """These tasks' results went to the master."""
        if self.alone:
            self.alone.difference_update(task_ids)

    def spread(self, takers: Dict[int, Dict[int, None]]
               ) -> List[Tuple[int, List[Frame], List[Queued]]]:
        """Hand what is queued to ``takers`` (worker id -> the tasks it holds, updated):
        each task to the least loaded, up to `depth` a worker. Returns each worker's
        ``[tasks, *payload]``, with what it was handed (for `take_back`)."""
        queue = self.queue
        if not queue or not takers:
            return []
        free = {wid: held for wid, held in takers.items() if not (self.alone and
                                                                   self.alone.intersection(held))}
        given: Dict[int, List[Queued]] = {}
        while queue and free:
            wid = min(free, key=lambda w: len(free[w]))
            held = free[wid]
            task = queue[0]
            if task[4]:  # alone: only on a worker holding nothing
                if held:
                    break
                self.alone.add(task[0])
            elif len(held) >= self.depth:
                break
            queue.popleft()
            held[task[0]] = None
            given.setdefault(wid, []).append(task)
            if task[4]:
                del free[wid]
        return [(wid, [PoolOps.TASKS, *pack_tasks(self._wire(wid, tasks))], tasks)
                for wid, tasks in given.items()]

    def take_back(self, worker_id: int, tasks: List[Queued], held: Dict[int, None]) -> None:
        """``tasks``, which `spread` handed worker ``worker_id``, never reached it (it
        has died, not reaped yet): back at the queue's head, in order, and out of
        ``held``, its tasks."""
        for task in reversed(tasks):
            self.queue.appendleft(task)
            held.pop(task[0], None)
            self.alone.discard(task[0])
        self._known.pop(worker_id, None)  # (it kept none of their functions)

    def _wire(self, worker_id: int, tasks: List[Queued]) -> List[WireTask]:
        """``tasks`` for worker ``worker_id``: a function's frames with its first."""
        known = self._known.get(worker_id)
        if known is None:
            known = self._known[worker_id] = {}
        wire: List[WireTask] = []
        for task_id, fid, fn_frames, arg_frames, _ in tasks:
            fn: Optional[Sequence[Frame]] = None if fid in known else fn_frames
            remember(known, fid, None)
            wire.append((task_id, fid, fn, arg_frames))
        return wire
