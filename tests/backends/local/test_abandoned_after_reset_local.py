"""A blocking ``acquire`` of a ``Lock`` or ``Semaphore``, or a ``Connection.recv``, whose
TCP connection to the object's hub is reset (``ss -K``, root: as a link's reset) while it
waits there, is asked again on a new connection; then its caller gives it up (an
exception a signal handler raises). The withdraw comes on the new connection and must
find the wait the hub kept from the old one: what the object's holder frees afterwards
(the lock, the semaphore's unit, the message) goes to the next caller, not to the
abandoned request (before, the lock stayed held until this process ended). The objects
are served by a real job of the local backend; this process reaches its hub over TCP,
as a process on another host would. The protocol: docs/contributing/resets.md."""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any, Callable, List

import pytest

import fiber
from fiber._core._clients import get_client
from fiber._process_state import here
from fiber.testing.conformance.support.waiting import wait_until
from fiber.transport import client as client_module
from fiber.transport import sockets
from fiber.transport.client import Client

from support.tcp_proxy import abort

#: The signal whose handler abandons the wait (not SIGALRM: pytest-timeout's).
_SIGNAL = signal.SIGUSR1


class GaveUp(Exception):
    """Raised by the test's signal handler in the waiting thread."""


def serve(kind: str, out: Any, go: Any) -> None:
    """Job A: makes the object (a lock it holds, a semaphore at 0, a pipe), hands it to
    the test, and frees it when told (releases it; sends two messages)."""
    if kind == "Pipe":
        reader, writer = fiber.Pipe(duplex=False)
        out.put(reader)
    else:
        obj = fiber.Lock() if kind == "Lock" else fiber.Semaphore(0)
        if kind == "Lock":
            obj.acquire()
        out.put(obj)
    go.get()
    if kind == "Pipe":
        writer.send("first")
        writer.send("second")
    else:
        obj.release()
    time.sleep(120)



def _replaced(first: Client) -> bool:
    """Whether ``first`` failed and this process has a new connection to its server."""
    return first.lost and any(c is not first and c.address == first.address and not c.lost
                              for c in list(here.transport.all_clients))


def _reset_then_give_up(first: Client, errors: List[BaseException]) -> None:
    """Reset ``first`` under the main thread's wait, let the wait be asked again on a
    new connection, then interrupt it with `_SIGNAL` (its handler raises `GaveUp`)."""
    try:
        time.sleep(0.5)  # the wait is parked at the hub
        abort(first.sock)
        wait_until(lambda: _replaced(first), 10, 0.01, "the wait asked again")
        time.sleep(0.5)  # parked again, from the new connection
    except BaseException as e:  # noqa: BLE001 (raised by the test)
        errors.append(e)
    finally:
        signal.pthread_kill(threading.main_thread().ident or 0, _SIGNAL)


def _in_a_thread(fn: Callable[[], Any], timeout: float) -> Any:
    """``fn()``, called by another thread of this process (a third party)."""
    result: List[Any] = []
    t = threading.Thread(target=lambda: result.append(fn()))
    t.start()
    t.join(timeout)
    assert not t.is_alive() and result, f"{fn} did not return in {timeout} s"
    return result[0]


def _take_lock(lock: Any) -> bool:
    got = lock.acquire(timeout=5)
    if got:
        lock.release()
    return bool(got)


def _two_messages(reader: Any) -> List[Any]:
    return [reader.recv() for _ in range(2) if reader.poll(5)]


_WAIT = {"Lock": lambda o: o.acquire(), "Semaphore": lambda o: o.acquire(),
         "Pipe": lambda o: o.recv()}
_THEN = {"Lock": _take_lock, "Semaphore": lambda o: o.acquire(timeout=5),
         "Pipe": _two_messages}
_EXPECTED = {"Lock": True, "Semaphore": True, "Pipe": ["first", "second"]}


@pytest.mark.parametrize("kind", sorted(_WAIT))
def test_a_wait_asked_again_after_a_reset_then_abandoned_keeps_nothing(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # TCP, as between hosts: this process would reach a job's hub on its Unix socket
    monkeypatch.setattr(client_module, "connect", lambda address, timeout, unix=True:
                        socket.create_connection(sockets.split_address(address), timeout))
    out: Any = fiber.Queue()
    go: Any = fiber.Queue()
    holder = fiber.Process(target=serve, args=(kind, out, go))
    holder.start()
    previous = signal.getsignal(_SIGNAL)
    try:
        obj = out.get(timeout=60)
        first = get_client(obj.hub_address)
        assert isinstance(first, Client) and first.may_reset  # TCP, asked again on resets
        errors: List[BaseException] = []
        resetter = threading.Thread(target=_reset_then_give_up, args=(first, errors))

        def give_up(*_: Any) -> None:
            raise GaveUp

        signal.signal(_SIGNAL, give_up)
        resetter.start()
        try:
            with pytest.raises(GaveUp):
                _WAIT[kind](obj)
        finally:
            resetter.join(30)
        if errors:
            raise errors[0]
        go.put("release")
        assert _in_a_thread(lambda: _THEN[kind](obj), 30) == _EXPECTED[kind]
    finally:
        signal.signal(_SIGNAL, previous)
        holder.terminate()
        holder.join(30)
