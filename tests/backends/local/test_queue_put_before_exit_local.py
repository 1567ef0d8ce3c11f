"""A put (fire-and-forget: no reply) made by a process that has exited is in the queue
once its exit is seen, as with ``multiprocessing``, whose child flushes its queues'
feeder threads as it exits: after ``p.join()``, ``get_nowait`` finds the item, and a
``JoinableQueue.join`` waits for its ``task_done``. Also when the put went on another
connection than the job's exit report: a thread of the child's, or a grandchild's (whose
exit report goes to its own parent). The queue's hub is made slow to read that put's
connection (its messages held back for a moment), as a busy hub on a loaded host is.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

import fiber
from fiber._core import _runtime
from fiber.queues._service import QueueOps

#: Seconds the hub holds back the messages of the connection that put.
HOLD_S = 1.0


def put_from_a_thread(q: Any) -> None:
    t = threading.Thread(target=q.put, args=("x",))
    t.start()
    t.join()


def put_from_a_grandchild(q: Any) -> None:
    g = fiber.Process(target=q.put, args=("x",))
    g.start()
    g.join()


def _hold_back_the_putter(hub: Any, name: bytes) -> None:
    """The hub serves the first connection that puts on queue ``name``, and what follows
    on it, only `HOLD_S` after that put arrived (in order, as it came)."""
    held: Dict[Any, List[Tuple[Any, ...]]] = {}
    dispatch = hub.dispatch
    opened = [False]

    def release() -> None:
        opened[0] = True
        for peer, messages in held.items():
            for message in messages:
                dispatch(peer, *message)
        held.clear()

    def holding(peer: Any, service: bytes, op: bytes, req_id: bytes, payload: Any) -> None:
        if not opened[0] and not type(peer).__name__.startswith("Local") and (
                peer in held or (service == name and op == QueueOps.PUT)):
            if not held:
                hub.call_later(HOLD_S, release)
            held.setdefault(peer, []).append(
                (service, op, req_id, [bytes(f) for f in payload]))
            return
        dispatch(peer, service, op, req_id, payload)

    hub.dispatch = holding


@pytest.mark.parametrize("target", [put_from_a_thread, put_from_a_grandchild],
                         ids=["thread", "grandchild"])
def test_a_put_of_an_exited_process_is_in_the_queue_once_its_exit_is_seen(
        target: Any) -> None:
    q: Any = fiber.JoinableQueue()
    hub = _runtime.hub()
    _hold_back_the_putter(hub, q._name)  # noqa: SLF001 - the queue's service name
    try:
        p = fiber.Process(target=target, args=(q,))
        p.start()
        p.join(30)
        assert p.exitcode == 0
        joined = threading.Event()
        joiner = threading.Thread(target=lambda: (q.join(), joined.set()))
        try:
            got = q.get_nowait()
        except queue.Empty:
            got = None
        joiner.start()
        try:
            assert got == "x", "an item put before the producer's exit was not in the queue"
            time.sleep(0.2)
            assert not joined.is_set(), "join() returned with an item not task_done"
        finally:
            if got is not None:
                q.task_done()
            else:  # (the item comes late: take it, and let the joiner go)
                q.get(timeout=30)
                q.task_done()
            joiner.join(30)
        assert joined.is_set()
    finally:
        del hub.dispatch  # the class's again


def put_from_many_threads(q: Any, n: int) -> None:
    """``n`` threads put one item each and end, one after the other; then the number of
    connections the process still notes (`Client.sent_unanswered`) is put last."""
    from fiber._process_state import here

    for i in range(n):
        t = threading.Thread(target=q.put, args=(i,))
        t.start()
        t.join()
    q.put(("noted", len(here.transport.unanswered)))


def test_the_puts_of_many_ended_threads_are_all_in_the_queue_and_their_connections_go(
        ) -> None:
    """Each thread puts on a connection of its own, kept (open) for the job's end past
    its thread's: past `UNANSWERED_SWEEP` of them, those of ended threads are synced and
    let go. Every item is there once the producer's exit is seen, and the producer held
    no more than the sweep's bound of connections."""
    from fiber.transport.client import UNANSWERED_SWEEP

    n = UNANSWERED_SWEEP + 16
    q: Any = fiber.Queue()
    p = fiber.Process(target=put_from_many_threads, args=(q, n))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    got = []
    try:
        while True:
            got.append(q.get_nowait())
    except queue.Empty:
        pass
    assert sorted(x for x in got if isinstance(x, int)) == list(range(n)), got
    (noted,) = [x[1] for x in got if isinstance(x, tuple)]
    assert noted <= UNANSWERED_SWEEP + 1, noted
