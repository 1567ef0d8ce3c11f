"""Queue, SimpleQueue, JoinableQueue across processes on the backend under test."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time

import helpers
import numpy as np
import pytest


def test_put_get_between_processes(ctx):
    q, out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=helpers.roundtrip_queue, args=(q, out))
    p.start()
    q.put({"a": [1, 2, 3]})
    assert out.get(timeout=60) == {"a": [1, 2, 3]}
    p.join(60)


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


def test_unpicklable_item_fails_in_caller_and_queue_goes_on(ctx):
    q = ctx.Queue()
    with pytest.raises(TypeError):
        q.put(threading.Lock())
    q.put("fine")
    assert q.get(timeout=10) == "fine"


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
