"""Queue, SimpleQueue, JoinableQueue across processes on the backend under test."""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import threading
import time
from typing import Iterator

import numpy as np
import pytest

import fiber

from .support import helpers
from .support.waiting import wait_until


def test_put_get_between_processes(ctx):
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=helpers.roundtrip_queue, args=(q, out))
    p.start()
    q.put({"a": [1, 2, 3]})
    assert out.get(timeout=60) == {"a": [1, 2, 3]}
    p.join(60)


def test_a_consumer_that_ends_leaves_exactly_what_it_did_not_take(ctx):
    """A consumer whose gets met a backlog holds items lent ahead when it ends: right
    after its ``join`` the queue counts exactly the items it did not take, and gives
    them in their order (its lease settles at its end, after the acknowledgements of its
    takes: see fiber.queues._lending)."""
    q, out = ctx.Queue(), ctx.Queue()
    n, k = 500, 137
    for i in range(n):
        q.put(i)
    p = ctx.Process(target=helpers.take_some, args=(q, k, out))
    p.start()
    assert out.get(timeout=60) == list(range(k))
    p.join(60)
    assert p.exitcode == 0
    assert q.qsize() == n - k
    assert [q.get(timeout=10) for _ in range(n - k)] == list(range(k, n))
    assert q.empty()


def test_waiting_threads_of_the_creating_process(ctx):
    """In the queue's own process one waiting thread serves the hub's connections and
    the others wait as usual; each is woken by an item from a child or from a thread."""
    q, out = ctx.Queue(), ctx.Queue()
    got = []
    getters = [threading.Thread(target=lambda: got.append(q.get(timeout=60)))
               for _ in range(3)]
    for t in getters:
        t.start()
    p = ctx.Process(target=helpers.roundtrip_queue, args=(out, q))
    p.start()
    out.put("from a child")
    threading.Timer(0.2, q.put, ("from a thread",)).start()
    q.put("from here")
    for t in getters:
        t.join(60)
    assert sorted(got) == ["from a child", "from a thread", "from here"]
    # A reply made by another thread wakes the thread that serves meanwhile.
    threading.Timer(0.2, q.put, ("late",)).start()
    t0 = time.monotonic()
    assert q.get(timeout=60) == "late"
    assert time.monotonic() - t0 < 10
    p.join(60)


def test_get_timeout_and_nonblocking_raise_empty(ctx):
    q = ctx.Queue()
    t = time.monotonic()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.3)
    assert 0.25 < time.monotonic() - t < 10
    with pytest.raises(queue.Empty):
        q.get(False)
    with pytest.raises(queue.Empty):
        q.get_nowait()


def test_maxsize_blocks_and_raises_full(ctx):
    q = ctx.Queue(maxsize=2)
    q.put(1)
    q.put(2)
    assert q.full() and q.qsize() == 2
    with pytest.raises(queue.Full):
        q.put(3, block=False)
    t = time.monotonic()
    with pytest.raises(queue.Full):
        q.put(3, timeout=0.3)
    assert time.monotonic() - t >= 0.25
    threading.Timer(0.3, q.get).start()
    q.put(4, timeout=30)  # unblocked by the get
    assert [q.get(timeout=5), q.get(timeout=5)] == [2, 4]
    assert q.empty()


def test_semantics_match_multiprocessing(ctx):
    def scenario(q):
        out = []
        for i in range(5):
            q.put(i)
        out.append(q.get())
        q.put("x")
        while True:
            try:
                out.append(q.get(timeout=0.2))
            except queue.Empty:
                break
        return out
    assert scenario(ctx.Queue()) == scenario(multiprocessing.Queue())


def test_many_writers_many_readers_exactly_once(ctx):
    q, out = ctx.Queue(), ctx.Queue()
    writers = [ctx.Process(target=helpers.produce, args=(q, i * 300, 300)) for i in range(3)]
    readers = [ctx.Process(target=helpers.consume, args=(q, out)) for _ in range(3)]
    for p in writers + readers:
        p.start()
    for p in writers:
        p.join(120)
    for _ in readers:
        q.put(None)
    got = [item for _ in readers for item in out.get(timeout=120)]
    for p in readers:
        p.join(60)
    assert sorted(got) == list(range(900))
    assert all(p.exitcode == 0 for p in writers + readers)


def test_joinable_queue(ctx):
    q = ctx.JoinableQueue()
    p = ctx.Process(target=helpers.joinable_worker, args=(q,))
    p.start()
    for i in range(20):
        q.put(i)
    q.put(None)
    q.join()  # returns only when the worker called task_done 21 times
    p.join(60)
    assert p.exitcode == 0
    with pytest.raises(ValueError, match="too many"):
        q.task_done()


def test_simple_queue(ctx):
    q = ctx.SimpleQueue()
    assert q.empty()
    p = ctx.Process(target=helpers.produce, args=(q, 0, 3))
    p.start()
    assert [q.get() for _ in range(3)] == [0, 1, 2]
    p.join(60)
    q.close()


def test_closed_queue_refuses(ctx):
    q = ctx.Queue()
    q.close()
    with pytest.raises(ValueError, match="closed"):
        q.put(1)
    q.join_thread()
    q.cancel_join_thread()


def test_unpicklable_item_is_dropped_and_queue_goes_on(ctx, capsys):
    """As multiprocessing's feeder thread: ``put`` returns, the error is printed (by the
    ``_on_queue_feeder_error`` hook), later items arrive and a bound counts right;
    ``SimpleQueue.put`` pickles in the caller and raises, as multiprocessing's."""
    for q in ctx.Queue(), ctx.Queue(maxsize=1), ctx.JoinableQueue():
        q.put(threading.Lock())
        q.put("fine")
        assert q.qsize() == 1
        assert q.get(timeout=10) == "fine"
        assert q.empty()
    assert capsys.readouterr().err.count("cannot be pickled") == 3
    sq = ctx.SimpleQueue()
    with pytest.raises(TypeError):
        sq.put(threading.Lock())
    sq.put("fine")
    assert sq.get() == "fine"


class _FeederErrors(fiber.queues.Queue):
    """A queue whose hook records what it was given (as concurrent.futures' does)."""

    seen: list = []

    @staticmethod
    def _on_queue_feeder_error(e, obj):
        _FeederErrors.seen.append((type(e), obj))


class _RaisesInReduce:
    def __reduce__(self):
        raise AttributeError("no")


def test_feeder_error_hook_gets_the_error_and_the_item(ctx):
    _FeederErrors.seen.clear()  # (one run per backend)
    q = _FeederErrors(ctx=ctx)
    item = _RaisesInReduce()
    q.put(item)
    q.put(True)
    assert q.get(timeout=10) is True
    assert _FeederErrors.seen == [(AttributeError, item)]


def test_200mb_array_roundtrip_through_a_child(ctx):
    a = np.arange(25_000_000, dtype=np.float64)  # 200 MB
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=helpers.roundtrip_queue, args=(q, out))
    p.start()
    q.put(a)
    b = out.get(timeout=120)
    p.join(60)
    assert b.dtype == a.dtype and np.array_equal(a, b)
    b[0] = -1  # received arrays are writable, as with multiprocessing


def test_get_interrupted_loses_nothing(ctx):
    q = ctx.Queue()
    with pytest.raises(queue.Empty):
        q.get(timeout=0.1)
    for i in range(50):
        q.put(i)
    got = [q.get(timeout=10) for _ in range(50)]
    assert got == list(range(50))


def test_shared_queue_outlives_the_creators_handle(ctx):
    import gc

    carrier = ctx.Queue()
    q = ctx.Queue()
    q.put("still here")
    carrier.put(q)  # shared: another process may hold it longer than we do
    del q
    gc.collect()
    other = carrier.get(timeout=10)
    assert other.get(timeout=10) == "still here"


# -- a blocking put on a bounded queue abandoned by its caller -------------------------


class Interrupted(Exception):
    """Raised by the SIGALRM handler, as a program's own handler might."""


def _raise_interrupted(signum, frame):  # type: ignore[no-untyped-def]
    raise Interrupted()


@contextlib.contextmanager
def _alarm(seconds: float, handler=_raise_interrupted) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """Run ``handler`` (raise Interrupted) in the main thread after ``seconds``;
    pytest-timeout's own SIGALRM handler and timer are restored afterwards."""
    old_handler = signal.signal(signal.SIGALRM, handler)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        if old_delay:
            left = max(0.01, old_delay - (time.monotonic() - start))
            signal.setitimer(signal.ITIMER_REAL, left, old_interval)


def put_interrupted_by_alarm(q, out, release) -> None:  # type: ignore[no-untyped-def]
    """Child: a put on a full queue, interrupted by this process's own SIGALRM handler.
    It stays alive until released: its exit would drop a put left parked."""
    q.qsize()  # connected before the alarm is armed
    signal.signal(signal.SIGALRM, _raise_interrupted)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        q.put("second")
        out.put("not interrupted")
    except Interrupted:
        out.put("interrupted")  # same hub and connection as q: its withdrawal came first
    release.get(timeout=60)


def _join_within(q, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    t = threading.Thread(target=q.join, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive()


def _assert_holds_only(q, first: str) -> None:  # type: ignore[no-untyped-def]
    assert q.get(timeout=10) == first
    with pytest.raises(queue.Empty):
        q.get(timeout=0.5)  # multiprocessing: empty (before the fix "second" came here)
    assert q.qsize() == 0


@pytest.mark.parametrize("kind", ["Queue", "JoinableQueue"])
def test_put_interrupted_by_a_signal_is_not_delivered(ctx, kind):
    q = getattr(ctx, kind)(maxsize=1)
    q.put("first")
    with pytest.raises(Interrupted), _alarm(0.3):
        q.put("second")
    _assert_holds_only(q, "first")
    q.put("third", timeout=10)  # the slot is free, no withdrawn put takes it
    assert q.get(timeout=10) == "third"
    if kind == "JoinableQueue":
        q.task_done()
        q.task_done()
        assert _join_within(q, 30), "join() hangs: the withdrawn put was counted"


@pytest.mark.parametrize("kind", ["Queue", "JoinableQueue"])
def test_put_interrupted_in_a_child_is_not_delivered(ctx, kind):
    q, out, release = getattr(ctx, kind)(maxsize=1), ctx.Queue(), ctx.Queue()
    q.put("first")
    p = ctx.Process(target=put_interrupted_by_alarm, args=(q, out, release))
    p.start()
    try:
        assert out.get(timeout=60) == "interrupted"
        _assert_holds_only(q, "first")
        if kind == "JoinableQueue":
            q.task_done()
            assert _join_within(q, 30), "join() hangs: the withdrawn put was counted"
    finally:
        release.put(None)
        p.join(60)
    assert p.exitcode == 0


def test_put_timeout_full_leaves_nothing_behind(ctx):
    q = ctx.Queue(maxsize=1)
    q.put("first")
    with pytest.raises(queue.Full):
        q.put("second", timeout=0.3)
    with pytest.raises(Interrupted), _alarm(0.3):  # a put with a timeout, abandoned
        q.put("third", timeout=60)
    _assert_holds_only(q, "first")


def test_joinable_join_returns_after_an_abandoned_put(ctx):
    q = ctx.JoinableQueue(maxsize=1)
    q.put("first")
    with pytest.raises(Interrupted), _alarm(0.3):
        q.put("second")
    assert q.get(timeout=10) == "first"
    q.task_done()
    joined = _join_within(q, 30)
    if not joined:  # release the waiting thread before failing
        q.get(timeout=10)
        q.task_done()
    assert joined, "join() hangs: the abandoned put was admitted and counted"


def put_interrupted_after_admission(q, out, parked, admitted):  # type: ignore[no-untyped-def]
    """Child: the SIGALRM handler, run while the put waits, lets the parent take an item
    (which admits the put) and only then raises: the caller gives up on an admitted put."""
    import os

    def late_interrupt(signum, frame):  # type: ignore[no-untyped-def]
        open(parked, "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(admitted) and time.monotonic() < deadline:
            time.sleep(0.01)
        raise Interrupted()

    q.qsize()  # connected before the alarm is armed
    signal.signal(signal.SIGALRM, late_interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        q.put("second")
        out.put("not interrupted")
    except Interrupted:
        out.put("interrupted")


def _assert_holds_once(q, item: str) -> None:  # type: ignore[no-untyped-def]
    assert q.get(timeout=10) == item
    with pytest.raises(queue.Empty):
        q.get(timeout=0.5)
    if isinstance(q, fiber.JoinableQueue):
        q.task_done()
        q.task_done()
        assert _join_within(q, 30), "join() hangs: the unfinished count is off"
        with pytest.raises(ValueError, match="too many"):
            q.task_done()


@pytest.mark.parametrize("kind", ["Queue", "JoinableQueue"])
def test_put_abandoned_after_admission_counts_once_in_a_child(ctx, kind, tmp_path):
    q, out = getattr(ctx, kind)(maxsize=1), ctx.Queue()
    q.put("first")
    parked, admitted = str(tmp_path / "parked"), tmp_path / "admitted"
    p = ctx.Process(target=put_interrupted_after_admission,
                    args=(q, out, parked, str(admitted)))
    p.start()
    wait_until(lambda: os.path.exists(parked), 60, message="the child's put is parked")
    assert q.get(timeout=10) == "first"  # admits the parked put
    admitted.touch()
    assert out.get(timeout=60) == "interrupted"
    p.join(60)
    assert p.exitcode == 0
    _assert_holds_once(q, "second")  # put once, as a put that completed


@pytest.mark.parametrize("kind", ["Queue", "JoinableQueue"])
def test_put_abandoned_after_admission_counts_once_locally(ctx, kind):
    q = getattr(ctx, kind)(maxsize=1)
    q.put("first")
    taken = threading.Event()
    got = []

    def consumer() -> None:
        got.append(q.get(timeout=60))  # admits the parked put of the main thread
        taken.set()

    t = threading.Thread(target=consumer)

    def late_interrupt(signum, frame):  # type: ignore[no-untyped-def]
        t.start()
        taken.wait(60)
        raise Interrupted()

    try:
        with pytest.raises(Interrupted), _alarm(0.3, late_interrupt):
            q.put("second")
    finally:
        if t.ident is not None:
            t.join(60)
    assert got == ["first"]
    _assert_holds_once(q, "second")


# -- _reader: the queue as a waitable connection, in its creator (fiber.queues._reader) --


def test_a_queue_reader_is_readable_exactly_while_items_are_queued(ctx):
    q = ctx.SimpleQueue()
    reader = q._reader
    assert reader is q._reader
    assert not reader.poll()
    q.put("a")
    q.put("b")
    assert multiprocessing.connection.wait([reader], 60) == [reader]
    assert reader.recv() == "a"
    assert reader.poll()
    assert q.get() == "b"
    assert not reader.poll()
    p = ctx.Process(target=helpers.produce, args=(q, 0, 3))  # puts from another process
    p.start()
    got = []
    while len(got) < 3:
        assert multiprocessing.connection.wait([reader], 60) == [reader]
        got.append(reader.recv())
    assert got == [0, 1, 2]
    p.join(60)
    assert not reader.poll()
    q.close()
    assert reader.closed
    with pytest.raises(OSError):
        reader.fileno()


def test_a_queue_reader_only_in_the_creating_process(ctx):
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=helpers.try_reader, args=(q, out))
    p.start()
    kind, message = out.get(timeout=60)
    p.join(60)
    assert kind == "NotImplementedError"
    assert "created the queue" in message


def test_the_queue_without_reader_serves_on(ctx):
    """A reader closed, or collected with its queue's reference, leaves the queue as it
    was: its service no longer signals."""
    from fiber._core import _runtime

    q = ctx.SimpleQueue()
    q._reader.close()
    q.put(1)
    assert q.get() == 1
    q2 = ctx.Queue()
    service = _runtime.hub().service(q2._name)
    q2._reader  # noqa: B018 - made on first use
    assert service.signal is not None
    del q2.__dict__["_reader_end"]
    gc.collect()
    assert service.signal is None
    q2.put(2)
    assert q2.get(timeout=60) == 2
