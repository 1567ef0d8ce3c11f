"""Pipes and ``connection.wait`` in this process and its local jobs: EOF as multiprocessing's,
waits answered by the message that makes an end ready, several waiting threads, timeouts
that leave nothing on the hub, the CPU a waiting thread spends polling, and a first call
from a new thread while the job that owns the pipe (or queue) is paused."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import threading
import time

import pytest

import fiber
from fiber.connection import wait
from fiber.testing.conformance.support.waiting import hold
from fiber.transport import cpus as _cpus


def _recv_polled(seconds: float) -> float:
    """Time spent polling in a recv() that another thread answers ``seconds`` later (wall
    time in the poll loop: a loaded host gives the thread less CPU, not less of that)."""
    a, b = fiber.Pipe()
    sender = threading.Timer(seconds, b.send, ("late",))
    sender.start()
    start = _cpus.polled_seconds()
    assert a.recv() == "late"
    cpu = _cpus.polled_seconds() - start
    sender.join()
    a.close()
    b.close()
    return cpu


def _hub_watches() -> int:
    from fiber._core import _runtime
    from fiber.connection._watch import WAIT_SERVICE

    return len(_runtime.hub().service(WAIT_SERVICE).watches)


def test_eof_matches_multiprocessing_in_one_process():
    for mod in (fiber, multiprocessing):
        a, b = mod.Pipe()
        b.send(1)
        b.close()
        assert a.recv() == 1
        with pytest.raises(EOFError):
            a.recv()


def test_wait_is_answered_by_the_message_that_makes_an_end_ready():
    """A wait with no timeout returns when another thread sends; only the ready ends."""
    pairs = [fiber.Pipe() for _ in range(3)]
    threading.Timer(0.3, pairs[1][1].send, ("x",)).start()
    assert wait([a for a, _ in pairs]) == [pairs[1][0]]
    pairs[2][1].send("y")
    pairs[0][1].close()  # EOF counts as ready, as with an OS pipe
    assert wait([a for a, _ in pairs], timeout=10) == [a for a, _ in pairs]
    assert _hub_watches() == 0


def test_wait_times_out_and_leaves_nothing_on_the_hub():
    (a, b), (c, _d) = fiber.Pipe(), fiber.Pipe()
    start = time.monotonic()
    assert wait([a, c], timeout=0.3) == []
    assert time.monotonic() - start >= 0.29
    assert wait([a, c], timeout=0) == []
    assert _hub_watches() == 0
    with pytest.raises(OSError):
        wait([b, fiber.Pipe(duplex=False)[1]])  # write-only, as multiprocessing
    b.close()
    with pytest.raises(OSError):
        wait([b])  # closed


def test_several_threads_wait_on_one_end():
    a, b = fiber.Pipe()
    got = []
    threads = [threading.Thread(target=lambda: got.append(wait([a], timeout=60)))
               for _ in range(3)]
    for t in threads:
        t.start()
    time.sleep(0.2)
    b.send("x")
    for t in threads:
        t.join(60)
    assert got == [[a]] * 3  # readiness wakes every waiter; one of them will recv


def test_a_wait_polls_only_while_a_cpu_is_spare(monkeypatch):
    """A thread waiting for a local reply (here a pipe's next item) polls for ``spin_us``
    before it sleeps, only while the runnable tasks of the host leave a CPU to spare."""
    assert _cpus.runnable(b"0.52 0.58 0.59 2/345 6789\n") == 2
    assert isinstance(_cpus.spare_cpu(), bool)
    with fiber.config.override(spin_us=200_000):
        monkeypatch.setattr(_cpus, "spare_cpu", lambda: True)
        spun = _recv_polled(1.0)
        monkeypatch.setattr(_cpus, "spare_cpu", lambda: False)
        busy = _recv_polled(0.5)
    with fiber.config.override(spin_us=0):
        monkeypatch.setattr(_cpus, "spare_cpu", lambda: True)
        off = _recv_polled(0.5)
    assert 0.15 < spun < 0.7, spun
    assert busy < 0.05 and off < 0.01, (busy, off)


def own_a_pipe_and_a_queue(back):
    q, (_a, b) = fiber.Queue(), fiber.Pipe()
    back.put((q, b))
    time.sleep(60)  # (holds ``_a``: the pipe lives)


def _in_a_new_thread(call):
    """What ``call()`` returns or raises, in a thread of its own (no connection yet)."""
    box = []

    def run():
        try:
            box.append(call())
        except BaseException as e:
            box.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    return box[0] if box else "still blocked"


def test_a_first_call_from_a_thread_outlasts_a_short_pause_of_the_owner():
    """A thread's first call connects to the owner's hub within the connect timeout, not
    within the call's own timeout: an owner paused for half a second (stopped, or in a
    long call that holds the GIL) is not gone, and a poll or get that waited for it gives
    its timeout's answer, not EOF or a connection error."""
    back = fiber.Queue()
    p = fiber.Process(target=own_a_pipe_and_a_queue, args=(back,))
    p.start()
    try:
        q, b = back.get(timeout=30)
        b.poll()
        q.qsize()  # (this thread's connection: each call below makes its own)
        for call in (b.poll, lambda: b.poll(0.05), lambda: q.get(timeout=0.05)):
            hold(p.pid)
            resume = threading.Timer(0.5, os.kill, (p.pid, signal.SIGCONT))
            resume.start()
            got = _in_a_new_thread(call)
            resume.join()
            assert got is False or isinstance(got, queue.Empty), got
    finally:
        os.kill(p.pid, signal.SIGCONT)
        p.kill()
        p.join(30)
