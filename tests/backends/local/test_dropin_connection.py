"""``Connection.fileno()``: a descriptor readable while a message waits (issue 16), for
``select``, ``selectors`` and ``multiprocessing.connection.wait``, in the pipe's creator
and in any other process."""

from __future__ import annotations

import multiprocessing.connection as mpc
import select
import selectors
import threading

import pytest

from fiber.testing.conformance.support import dropin_helpers as dh
from fiber.testing.conformance.support.waiting import wait_until

pytestmark = pytest.mark.timeout(120)


def _readable(fd: int, timeout: float) -> bool:
    return bool(select.select([fd], [], [], timeout)[0])


def test_fileno_in_the_pipes_creator(ctx):
    a, b = ctx.Pipe()
    fd = a.fileno()
    assert a.fileno() == fd and not _readable(fd, 0)
    # The sender keeps its end open until told: once it has ended, the end of file makes
    # the descriptor readable (recv raises at once), which the check after "y" is not about.
    hold = ctx.Event()
    p = ctx.Process(target=dh.send_later, args=(b, ["x", "y"], 0.2, hold))
    p.start()
    b.close()
    assert mpc.wait([a], timeout=60) == [a]  # the standard library's wait takes it
    assert a.recv() == "x"
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ)
    assert [key.fileobj for key, _ in sel.select(60)] == [a]
    assert a.recv() == "y"
    assert not _readable(fd, 0)  # taken: never readable with nothing waiting
    assert not _readable(fd, 1.5)  # nor after the watcher's next look (each second)
    hold.set()
    p.join(60)
    assert [key.fileobj for key, _ in sel.select(60)] == [a]  # the other end closed: EOF
    with pytest.raises(EOFError):
        a.recv()
    sel.close()
    a.close()
    with pytest.raises(OSError):
        a.fileno()


def test_fileno_in_another_process(ctx):
    a, b = ctx.Pipe()
    q = ctx.Queue()
    p = ctx.Process(target=dh.select_then_recv, args=(b, q))
    p.start()
    assert q.get(timeout=60) == ("waiting", [])
    a.send("one")
    a.send("two")
    kind, got, after = q.get(timeout=60)
    assert (kind, got, after) == ("got", [(True, "one"), (True, "two")], [])
    p.join(60)
    assert p.exitcode == 0


def test_a_closed_connections_watcher_ends():
    import fiber

    a, b = fiber.Pipe()
    before = set(threading.enumerate())
    a.fileno()
    watchers = [t for t in set(threading.enumerate()) - before if t.name == "fiber-fileno"]
    assert len(watchers) == 1  # this end's (other tests' may still run)
    b.send(1)
    assert mpc.wait([a], timeout=60) == [a]
    a.close()
    wait_until(lambda: not watchers[0].is_alive(), 30, message="the fileno watcher to end")


def test_wait_returns_every_ready_object_with_a_sentinel(ctx):
    # as multiprocessing's (CPython's TestWait.test_wait_integer): a wait over
    # connections and an ended process's sentinel returns all that are ready, not only
    # the first source that answered (issue 32)
    from fiber.connection import wait

    a, b = ctx.Pipe()
    p = ctx.Process(target=dh.triple, args=(1,))
    p.start()
    p.join(60)
    assert wait([a, p.sentinel, b], 10) == [p.sentinel]
    a.send(None)
    assert wait([a, p.sentinel, b], 10) == [p.sentinel, b]
    b.send(None)
    assert wait([a, p.sentinel, b], 10) == [a, p.sentinel, b]
    a.close()
    b.close()
