"""A blocking ``Queue.get`` or ``Connection.recv`` in a job, abandoned by an exception its
SIGALRM handler raises (the alarm idiom): the job sees its own exception, unchanged (a
``TimeoutError`` too, though it is an ``OSError`` like a socket's errors), and the item
put or sent afterwards is not lost to the abandoned request; nor is one the hub handed
to it just before (given back). The job lives on meanwhile without reading again: it
sleeps (a wait on a fiber object would read the connection, and hand over a late reply
then), until it is terminated. Real jobs of the local backend, real signals."""

from __future__ import annotations

import signal
import time
from typing import Any, Callable, Optional

import pytest

import fiber


class GaveUp(Exception):
    """Raised by the tests' alarm handler: an exception that is not an ``OSError``."""


_RAISED = {"TimeoutError": TimeoutError, "GaveUp": GaveUp}


def _alarm(kind: str, first: Optional[Callable[[], None]]) -> None:
    """Raise ``kind`` 0.5 s from now, from a SIGALRM handler; calling ``first()`` before
    (which hands the waiting request an item), then leaving the hub time to send it."""
    def handler(*_: Any) -> None:
        if first is not None:
            first()
            time.sleep(0.5)
        raise _RAISED[kind]("alarm")

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 0.5)


def _until_alarm(block: Any, first: Any, out: Any, kind: str, got: str) -> None:
    """Block in ``block()`` until the alarm's handler (which calls ``first`` first, if
    any) raises; report what the job saw on ``out``, then live on without reading."""
    _alarm(kind, first)
    try:
        block()
        out.put(got)
    except _RAISED[kind]:
        out.put("caught")
    except BaseException as e:  # noqa: BLE001 (reported to the test)
        out.put(repr(e))
    time.sleep(120)  # alive, and not reading its connection to the hub


def get_until_alarm(q: Any, out: Any, kind: str, put_first: bool) -> None:
    q.qsize()  # connected before the alarm is set
    _until_alarm(q.get, (lambda: q.put("item")) if put_first else None, out, kind,
                 "got an item")


def recv_until_alarm(conn: Any, other: Any, out: Any, kind: str, send_first: bool) -> None:
    conn.poll()  # connected before the alarm is set
    _until_alarm(conn.recv, (lambda: other.send("msg")) if send_first else None, out, kind,
                 "got a message")


@pytest.mark.parametrize("kind", ["TimeoutError", "GaveUp"])
@pytest.mark.parametrize("handed_first", [False, True], ids=["put-after", "put-in-handler"])
def test_a_get_abandoned_by_a_signal_handler_loses_no_item(kind, handed_first):
    q, out = fiber.Queue(), fiber.Queue()
    p = fiber.Process(target=get_until_alarm, args=(q, out, kind, handed_first))
    p.start()
    try:
        assert out.get(timeout=60) == "caught"
        if not handed_first:
            q.put("item")
        assert q.get(timeout=10) == "item"
        assert q.qsize() == 0
    finally:
        p.terminate()
        p.join(30)
    assert q.qsize() == 0  # given back once, not again when the job ended


@pytest.mark.parametrize("kind", ["TimeoutError", "GaveUp"])
@pytest.mark.parametrize("handed_first", [False, True], ids=["send-after", "send-in-handler"])
def test_a_recv_abandoned_by_a_signal_handler_loses_no_message(kind, handed_first):
    a, b = fiber.Pipe()
    out = fiber.Queue()
    p = fiber.Process(target=recv_until_alarm, args=(b, a, out, kind, handed_first))
    p.start()
    try:
        assert out.get(timeout=60) == "caught"
        if not handed_first:
            a.send("msg")
        assert b.poll(10) and b.recv() == "msg"  # this process holds that end too
        assert not b.poll(0)
    finally:
        p.terminate()
        p.join(30)
    assert not b.poll(0.5)


def recv_until_alarm_two_sent(conn: Any, other: Any, out: Any, kind: str) -> None:
    """As `recv_until_alarm`, the handler sending two messages: the first is handed to
    the waiting recv (given back when it is abandoned), the second is queued behind."""
    conn.poll()
    _alarm(kind, lambda: (other.send("m1"), other.send("m2")))
    try:
        conn.recv()
        out.put("got a message")
    except _RAISED[kind]:
        out.put("caught")
    except BaseException as e:  # noqa: BLE001 (reported to the test)
        out.put(repr(e))
    time.sleep(120)


@pytest.mark.parametrize("kind", ["TimeoutError", "GaveUp"])
def test_a_message_given_back_is_received_first(kind):
    a, b = fiber.Pipe()
    out = fiber.Queue()
    p = fiber.Process(target=recv_until_alarm_two_sent, args=(b, a, out, kind))
    p.start()
    try:
        assert out.get(timeout=60) == "caught"
        got = [b.recv() for _ in range(2) if b.poll(10)]
        assert got == ["m1", "m2"]  # in the order sent, as multiprocessing's Pipe
        assert not b.poll(0)
    finally:
        p.terminate()
        p.join(30)
