"""Queue items lent ahead to consumers in other processes (fiber.queues._lending, issue
30): each item taken exactly once whatever the consumers do (hold their items and stop
asking, get killed, close the queue, race each other), ``qsize`` counting what is lent,
a bounded queue's room freed only by what is taken, and ``queue_prefetch = 0`` lending
nothing. Real processes of the local backend, killed with real signals.

The same at a distance (a 200 ms round trip, where lending is the point) is in
tests/backends/netns/test_multihost.py::test_a_queue_consumer_at_a_distance_is_not_paced_by_the_round_trip.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
from multiprocessing.connection import wait
from typing import Any, List

import pytest

import fiber
from fiber.testing.conformance.support.waiting import hold, wait_until

N = 100


def _lease_of(q: Any) -> Any:
    return q._lease(make=False)


def take_two_and_hold(q: Any, out: Any, release: Any) -> None:
    """Get two items (a handle borrows at its second backlog), wait until items are lent
    here, say so, then stop getting until ``release`` is set (holding what was lent),
    and close the queue."""
    first = [q.get(timeout=30), q.get(timeout=30)]
    deadline = time.monotonic() + 30
    while (_lease_of(q) is None or _lease_of(q).held() == 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    lease = _lease_of(q)
    out.put((first, os.getpid(), 0 if lease is None else lease.held()))
    release.wait(60)
    q.close()


def consume_until_none(q: Any, out: Any, tag: int) -> None:
    got = []
    while True:
        x = q.get(timeout=60)
        if x is None:
            break
        got.append(x)
    out.put((tag, got, _lease_of(q) is not None))


def produce(q: Any, start: int, n: int) -> None:
    for i in range(start, start + n):
        q.put(i)


def _produce_then_stop(q: Any, out: Any, producers: List[Any], consumers: List[Any],
                       timeout: float, join: float) -> List[Any]:
    """Start them all, join the producers, put a ``None`` for each consumer (each stops
    at one: see `consume_until_none`), and return what the consumers sent back, once
    joined (``timeout``: each producer's join and each answer; ``join``: a consumer's)."""
    for p in consumers + producers:
        p.start()
    for p in producers:
        p.join(timeout)
    for _ in consumers:
        q.put(None)
    results = [out.get(timeout=timeout) for _ in consumers]
    for p in consumers:
        p.join(join)
    return results


def _fill(q: Any, n: int = N) -> None:
    for i in range(n):
        q.put(i)
    wait_until(lambda: q.qsize() == n, 10, 0.01, "the items queued")


def test_items_held_by_an_idle_consumer_are_recalled_when_another_waits():
    """A consumer that got one item holds ~16 more lent to it and stops asking: another
    consumer (here the creator, which waits on an empty queue) gets every other item,
    each once, and qsize counted the lent ones as queued."""
    q, out, release = fiber.Queue(), fiber.Queue(), fiber.Event()
    _fill(q)
    p = fiber.Process(target=take_two_and_hold, args=(q, out, release))
    p.start()
    first, _, held = out.get(timeout=60)
    assert first == [0, 1] and held >= 10, held  # items were lent ahead
    assert q.qsize() == N - 2  # lent items are still in the queue
    rest = [q.get(timeout=10) for _ in range(N - 2)]  # needs the recall
    assert sorted(rest) == list(range(2, N)), rest
    release.set()
    p.join(30)
    assert p.exitcode == 0 and q.qsize() == 0


def test_items_lent_to_a_consumer_killed_with_sigkill_go_back_to_the_queue():
    q, out, release = fiber.Queue(), fiber.Queue(), fiber.Event()
    _fill(q)
    p = fiber.Process(target=take_two_and_hold, args=(q, out, release))
    p.start()
    first, pid, held = out.get(timeout=60)
    assert first == [0, 1] and held >= 10, held
    os.kill(pid, signal.SIGKILL)
    p.join(30)
    assert p.exitcode == -signal.SIGKILL
    wait_until(lambda: q.qsize() == N - 2, 10, 0.05, "the lent items back")
    rest = [q.get(timeout=10) for _ in range(N - 2)]
    assert rest == list(range(2, N))  # back at the front, in queue order
    with pytest.raises(queue.Empty):
        q.get(timeout=0.2)


def test_items_back_from_a_killed_consumer_make_the_queues_reader_readable():
    """Items that come back with no request (a consumer's end, not a get) show on the
    creator's ``q._reader``, which ``multiprocessing.connection.wait`` watches (as
    ``concurrent.futures`` does)."""
    q, out, release = fiber.Queue(), fiber.Queue(), fiber.Event()
    _fill(q)
    reader = q._reader
    p = fiber.Process(target=take_two_and_hold, args=(q, out, release))
    p.start()
    first, pid, held = out.get(timeout=60)
    assert first == [0, 1] and held >= 10, held
    hold(pid)  # it answers no recall: its items come back at its end
    try:
        while wait([reader], timeout=0.5):
            reader.recv()
    finally:
        os.kill(pid, signal.SIGKILL)
    p.join(30)
    assert wait([reader], timeout=10) == [reader]
    assert reader.recv() == 2  # back at the front


def test_a_consumer_that_closes_the_queue_gives_its_items_back():
    q, out, release = fiber.Queue(), fiber.Queue(), fiber.Event()
    _fill(q)
    p = fiber.Process(target=take_two_and_hold, args=(q, out, release))
    p.start()
    first, _, held = out.get(timeout=60)
    assert held >= 10
    release.set()  # the consumer closes its queue and exits
    p.join(30)
    assert p.exitcode == 0
    assert [q.get(timeout=10) for _ in range(N - 2)] == list(range(2, N))


def test_four_consumers_two_producers_every_item_once():
    """20,000 items from two producers to four consumers that race for them: every item
    taken exactly once, each producer's items in the order put for a consumer that only
    ever took from the front (lending on, as it is by default)."""
    q, out = fiber.Queue(), fiber.Queue()
    n = 10_000
    consumers = [fiber.Process(target=consume_until_none, args=(q, out, c)) for c in range(4)]
    producers = [fiber.Process(target=produce, args=(q, k * n, n)) for k in range(2)]
    results = _produce_then_stop(q, out, producers, consumers, 120, join=30)
    got: List[int] = [x for _, xs, _ in results for x in xs]
    assert len(got) == 2 * n and sorted(got) == list(range(2 * n))
    assert any(leased for _, _, leased in results)  # lending did happen
    assert [p.exitcode for p in consumers + producers] == [0] * 6
    assert q.qsize() == 0


def test_a_bounded_queue_counts_lent_items_until_taken():
    """maxsize=8: what is lent still fills the queue, so a blocked put is admitted only
    when a consumer takes an item. 300 items through it, in order, once."""
    q, out = fiber.Queue(8), fiber.Queue()
    c = fiber.Process(target=consume_until_none, args=(q, out, 0))
    c.start()
    for i in range(300):
        q.put(i, timeout=30)
        assert q.qsize() <= 8
    q.put(None, timeout=30)
    _, got, _ = out.get(timeout=60)
    c.join(30)
    assert got == list(range(300)) and c.exitcode == 0


def test_a_joinable_queue_joins_when_lent_items_are_done():
    q = fiber.JoinableQueue()
    _fill(q, 200)
    q.put(None)
    p = fiber.Process(target=drain_and_mark_done, args=(q,))
    p.start()
    q.join()  # returns once the consumer marked all 201 done
    p.join(30)
    assert p.exitcode == 0 and q.qsize() == 0


def drain_and_mark_done(q: Any) -> None:
    while True:
        x = q.get(timeout=30)
        q.task_done()
        if x is None:
            return


def report_lease(q: Any, out: Any) -> None:
    got = [q.get(timeout=30) for _ in range(N)]
    out.put((got, _lease_of(q) is not None))


def test_queue_prefetch_zero_lends_nothing():
    with fiber.config.override(queue_prefetch=0):
        q, out = fiber.Queue(), fiber.Queue()
        _fill(q)
        p = fiber.Process(target=report_lease, args=(q, out))
        p.start()
        got, leased = out.get(timeout=60)
        p.join(30)
    assert got == list(range(N)) and not leased
    q2, out2 = fiber.Queue(), fiber.Queue()  # and the default lends
    _fill(q2)
    p = fiber.Process(target=report_lease, args=(q2, out2))
    p.start()
    got, leased = out2.get(timeout=60)
    p.join(30)
    assert got == list(range(N)) and leased


def take_all_then_count(q: Any, out: Any, n: int) -> None:
    got, wrong = [], []
    for i in range(n):
        got.append(q.get(timeout=30))
        size = q.qsize()
        if size != n - 1 - i:
            wrong.append((i, size))
    out.put((got, q.empty(), wrong, _lease_of(q) is not None))


def test_a_consumers_own_count_after_its_gets_sees_them():
    """A consumer's ``qsize()`` after each of its ``get``s (most of them taking lent
    items) counts that item as gone: its count goes after the acknowledgements of its
    takes (CPython's TestSyncManagerTypes.test_joinable_queue checks ``empty()`` so)."""
    for _ in range(3):
        q, out = fiber.JoinableQueue(), fiber.Queue()
        _fill(q, 200)
        p = fiber.Process(target=take_all_then_count, args=(q, out, 200))
        p.start()
        got, empty, wrong, leased = out.get(timeout=60)
        p.join(30)
        assert got == list(range(200)) and empty and wrong == [] and leased, wrong


def drain_without_waiting(q: Any, out: Any) -> None:
    got = []
    while not q.empty():
        got.append(q.get_nowait())
    out.put(got)


def test_a_consumer_draining_with_get_nowait_gets_every_item_in_order():
    """``while not q.empty(): q.get_nowait()`` in a consumer elsewhere: a get that does
    not wait still waits for items already on their way to it (a pull under way), so it
    neither says Empty while they come nor takes a later item first."""
    for _ in range(3):
        q, out = fiber.Queue(), fiber.Queue()
        _fill(q, 300)
        p = fiber.Process(target=drain_without_waiting, args=(q, out))
        p.start()
        got = out.get(timeout=60)
        p.join(30)
        assert got == list(range(300)) and p.exitcode == 0


def test_a_consumer_that_polls_has_lent_items_recalled_too():
    """A consumer that only polls (``get_nowait``) while another holds lent items gets
    them: a get that finds the queue empty recalls them whether or not it waits."""
    q, out, release = fiber.Queue(), fiber.Queue(), fiber.Event()
    _fill(q)
    p = fiber.Process(target=take_two_and_hold, args=(q, out, release))
    p.start()
    _, _, held = out.get(timeout=60)
    assert held >= 10
    rest: List[int] = []
    deadline = time.monotonic() + 20
    while len(rest) < N - 2 and time.monotonic() < deadline:
        try:
            rest.append(q.get_nowait())
        except queue.Empty:
            time.sleep(0.01)
    release.set()
    p.join(30)
    assert sorted(rest) == list(range(2, N)), len(rest)


def hold_then_fork(q: Any, out: Any) -> None:
    """Hold lent items, fork a child (as multiprocessing's fork does) that outlives this
    process, and wait to be killed."""
    [q.get(timeout=30), q.get(timeout=30)]
    deadline = time.monotonic() + 30
    while (_lease_of(q) is None or _lease_of(q).held() == 0) and time.monotonic() < deadline:
        time.sleep(0.01)
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    out.put((os.getpid(), child, _lease_of(q).held()))
    time.sleep(60)


def test_a_forked_child_does_not_keep_its_parents_loan():
    """The consumer's forked child lets go of its copy of the lease's connection: when
    the consumer is SIGKILLed, the hub sees that connection end and puts its items back
    although the child lives on."""
    q, out = fiber.Queue(), fiber.Queue()
    _fill(q)
    p = fiber.Process(target=hold_then_fork, args=(q, out))
    p.start()
    pid, child, held = out.get(timeout=60)
    try:
        assert held >= 10
        os.kill(pid, signal.SIGKILL)
        p.join(30)
        assert [q.get(timeout=10) for _ in range(N - 2)] == list(range(2, N))
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def get_then_put_nowait(q: Any, out: Any, rounds: int) -> None:
    full = 0
    for i in range(rounds):
        q.get(timeout=30)
        try:
            q.put_nowait(i)
        except queue.Full:
            full += 1
    out.put(full)


def test_a_put_nowait_after_a_get_finds_the_room_it_made():
    """A bounded queue kept full: a consumer that takes an item (lent) and at once puts
    one without waiting is never told Full: its put goes after its take's
    acknowledgement."""
    q, out = fiber.Queue(20), fiber.Queue()
    for i in range(20):
        q.put(i)
    p = fiber.Process(target=get_then_put_nowait, args=(q, out, 300))
    p.start()
    assert out.get(timeout=60) == 0
    p.join(30)
    assert q.qsize() == 20


@pytest.mark.one_python  # fiber's lending, not the interpreter's: 100 rounds, ~2 min of 3 hogs
def test_readers_that_stop_at_a_sentinel_leave_nothing_behind_on_a_loaded_machine():
    """Three writers, joined; then a ``None`` for each of three readers, which stop at
    it: every item is got (as with multiprocessing: what was put before the sentinels is
    got before them). A CI run left seven items in the queue, read by nobody: a reader's
    lent items went back to the front of the queue after another's, or after that
    reader's next ``get`` was answered. The race wants a busy machine: three spinning
    processes make one (before: 14 rounds in 500 lost items; this runs 100).
    tests/unit/test_queue_give_back.py replays the CI run's order of events."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        for round_ in range(100):
            q, out = fiber.Queue(), fiber.Queue()
            writers = [fiber.Process(target=produce, args=(q, i * 300, 300)) for i in range(3)]
            readers = [fiber.Process(target=consume_until_none, args=(q, out, i))
                       for i in range(3)]
            results = _produce_then_stop(q, out, writers, readers, 60, join=60)
            got = sorted(x for _, xs, _ in results for x in xs)
            assert got == list(range(900)), (
                f"round {round_}: {900 - len(got)} items not got, "
                f"{q.qsize()} left in the queue")
            assert [p.exitcode for p in writers + readers] == [0] * 6
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
