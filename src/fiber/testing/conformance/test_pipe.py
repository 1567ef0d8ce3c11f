"""Pipe and Connection across processes on the backend under test."""

from __future__ import annotations

import array
import threading
import time

import pytest

import fiber
from fiber.connection import BufferTooShort, wait

from .support import helpers
from .support.waiting import wait_until


def test_duplex_echo_with_child(ctx):
    a, b = ctx.Pipe()
    p = ctx.Process(target=helpers.echo_pipe, args=(b,))
    p.start()
    b.close()
    for msg in (1, "two", {"three": [3]}, None):
        a.send(msg)
        assert a.recv() == msg
    a.close()  # the child sees EOF and returns
    p.join(60)
    assert p.exitcode == 0


def test_an_end_given_away_outlives_the_creators_end(ctx):
    """The creator keeps one end and gives the other away; once it closes and drops its
    own, the other holder still reads what is left, then EOF (the pipe was unregistered
    when the creator's end, never pickled itself, was collected: LookupError)."""
    import gc

    a, b = ctx.Pipe()
    q = ctx.Queue()
    echo = ctx.Process(target=helpers.echo_pipe_from, args=(q,))
    echo.start()
    q.put(b)  # pickled, and nothing keeps it here
    b.close()
    del b
    a.send("one")
    assert a.recv() == "one"
    a.send("two")
    a.close()
    del a
    gc.collect()
    echo.join(60)  # echoes "two" into a closed end (dropped), then sees EOF and returns
    assert echo.exitcode == 0


def test_one_way_pipe(ctx):
    r, w = ctx.Pipe(duplex=False)
    assert r.readable and not r.writable and w.writable and not w.readable
    with pytest.raises(OSError):
        r.send(1)
    with pytest.raises(OSError):
        w.recv()
    p = ctx.Process(target=helpers.send_then_exit, args=(w, "hello"))
    p.start()
    w.close()
    assert r.recv() == "hello"
    p.join(60)
    with pytest.raises(EOFError):
        r.recv()


def test_eof_when_peer_is_killed(ctx):
    a, b = ctx.Pipe()
    p = ctx.Process(target=helpers.echo_pipe, args=(b,))
    p.start()
    b.close()
    a.send("ping")
    assert a.recv() == "ping"
    p.kill()
    p.join(30)
    with pytest.raises(EOFError):
        a.recv()
    assert a.poll(0)  # as with an OS pipe: EOF is "readable"


def test_bytes_api(ctx):
    a, b = ctx.Pipe()
    a.send_bytes(b"0123456789", 2, 5)
    assert b.recv_bytes() == b"23456"
    a.send_bytes(b"abc")
    buf = bytearray(10)
    assert b.recv_bytes_into(buf, 4) == 3 and buf[4:7] == b"abc"
    a.send_bytes(b"x" * 20)
    with pytest.raises(BufferTooShort):
        b.recv_bytes_into(bytearray(5))
    a.send_bytes(array.array("i", [1, 2]))
    assert len(b.recv_bytes()) == 8
    a.send([1, 2])
    assert b.recv_bytes() == __import__("pickle").dumps([1, 2], protocol=5)
    a.send_bytes(b"long message")
    with pytest.raises(OSError):
        b.recv_bytes(maxlength=3)
    with pytest.raises(ValueError):
        a.send_bytes(b"abc", 2, 5)


def test_poll_timeout(ctx):
    a, b = ctx.Pipe()
    t = time.monotonic()
    assert b.poll(0.3) is False
    assert time.monotonic() - t >= 0.25
    assert b.poll() is False
    a.send(5)
    assert b.poll(10) is True
    assert b.recv() == 5


def test_send_to_a_closed_end_raises_broken_pipe_in_the_creator(ctx):
    """As with an OS pipe: a send once the reading end is closed everywhere raises
    BrokenPipeError (here in the pipe's creator), whether it was closed here or by the
    end of the child that held it."""
    a, b = ctx.Pipe()
    b.close()
    with pytest.raises(BrokenPipeError):
        a.send(1)
    with pytest.raises(BrokenPipeError):
        a.send_bytes(b"1")
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=helpers.recv_n_then_exit, args=(r, 3))
    p.start()
    r.close()
    for i in range(3):
        w.send(i)
    p.join(60)

    def broken() -> bool:  # the hub learns of the child's end a moment after join()
        try:
            w.send("more")
        except BrokenPipeError:
            return True
        return False

    wait_until(broken, 30, message="BrokenPipeError once the reader has ended")


def test_what_is_sent_to_an_end_nobody_holds_is_not_kept(ctx):
    """A child sending into a pipe whose reader is closed does not fill its creator's
    memory: the messages are dropped (the sender, elsewhere, is not told)."""
    from fiber._core import _runtime

    r, w = ctx.Pipe(duplex=False)
    r.close()
    p = ctx.Process(target=helpers.send_many, args=(w, 200, 100_000))
    p.start()
    w.close()
    p.join(120)
    assert p.exitcode == 0
    service = _runtime.hub().service(r._name)
    assert service is not None and len(service.channels[0]) == 0


def test_closed_connection_raises(ctx):
    a, b = ctx.Pipe()
    a.close()
    assert a.closed
    with pytest.raises(OSError):
        a.send(1)
    with pytest.raises(OSError):
        a.recv()
    with pytest.raises(EOFError):
        b.recv()


def test_wait_over_connections_and_sentinels(ctx):
    a, b = ctx.Pipe()
    c, d = ctx.Pipe()
    p = ctx.Process(target=helpers.sleep, args=(0.5,))
    p.start()
    assert wait([a, c], timeout=0.2) == []
    d.send("x")
    assert wait([a, c], timeout=10) == [c]
    assert wait([a, p.sentinel], timeout=30) == [p.sentinel]
    p.join(10)


def _hub_watches() -> int:
    from fiber._core import _runtime
    from fiber.connection._watch import WAIT_SERVICE

    return len(_runtime.hub().service(WAIT_SERVICE).watches)


def test_wait_over_hubs_and_sentinels(ctx):
    """Ends served by this process's hub and a child's, and a sentinel, in one wait:
    each source wakes it, and the requests it no longer needs are withdrawn from both
    hubs."""
    a, b = ctx.Pipe()
    p = ctx.Process(target=helpers.pipe_of_my_own, args=(b,))
    p.start()
    b.close()
    theirs = a.recv()
    local, other = ctx.Pipe()
    sleeper = ctx.Process(target=helpers.sleep, args=(120,))
    sleeper.start()
    watched = [local, theirs, sleeper.sentinel]
    assert wait(watched, timeout=0.2) == []
    a.send("send")
    assert wait(watched, timeout=60) == [theirs]
    assert theirs.recv() == "from the child's hub"
    threading.Timer(0.3, other.send, ("here",)).start()
    assert wait(watched, timeout=60) == [local]
    assert local.recv() == "here"
    sleeper.kill()
    assert wait(watched, timeout=60) == [sleeper.sentinel]
    assert _hub_watches() == 0

    def child_watches() -> int:  # a withdrawal is a message the child's hub reads later
        a.send("watches")
        return a.recv()

    wait_until(lambda: child_watches() == 0, timeout=30)
    a.send(None)
    assert wait([local, theirs], timeout=60) == [theirs]  # the child ended: EOF
    with pytest.raises(EOFError):
        theirs.recv()
    p.join(60)
    sleeper.join(60)


def test_wait_in_a_child_over_ends_of_the_parents_hub(ctx):
    a, b = ctx.Pipe()
    c, d = ctx.Pipe()
    p = ctx.Process(target=helpers.wait_then_report, args=([b, d],))
    p.start()
    time.sleep(0.3)
    c.send("x")
    assert a.recv() == [1]
    p.join(60)
    assert p.exitcode == 0


@pytest.mark.parametrize("spare", [True, False])
def test_a_child_waiting_for_a_reply_polls_only_while_a_cpu_is_spare(ctx, spare):
    """A child's wait for a reply of another process's hub (here its pipe end's next
    item) polls for ``spin_us`` first, while a CPU is spare."""
    a, b = ctx.Pipe()
    with fiber.config.override(spin_us=200_000):  # the config travels to the child
        p = ctx.Process(target=helpers.timed_recv, args=(b, spare))
        p.start()
    b.close()
    assert a.recv() == "ready"
    time.sleep(1.0)  # the child is waiting
    a.send("late")
    item, cpu = a.recv()
    p.join(60)
    assert item == "late" and p.exitcode == 0
    if spare:
        assert 0.15 < cpu < 0.7, cpu
    else:
        assert cpu < 0.05, cpu
