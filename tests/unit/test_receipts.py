"""A request asked again after its connection's reset is answered once (issue 30,
`fiber.transport.receipts`): a real server and real TCP connections on 127.0.0.1, the
reset made by closing a client's socket with ``SO_LINGER`` 0 (the kernel sends RST)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any, List

import pytest

from fiber.transport import client as client_module
from fiber.transport import receipts
from fiber.transport.client import Client
from fiber.transport.server import Server, Service
from fiber.transport.sockets import split_address


class _Slow(Service):
    """Counts the requests it serves; answers each 0.3 s later, from another thread, with
    the count (as a manager's object answers from a worker thread)."""

    answers_again = True

    def __init__(self) -> None:
        self.served = 0

    def handle(self, server: Server, peer: Any, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        self.served += 1
        count = self.served

        def answer() -> None:
            time.sleep(0.3)
            with server.lock:
                server.reply(peer, req_id, b"ok", [str(count).encode()])

        threading.Thread(target=answer, daemon=True).start()


class _Dropping(_Slow):
    answers_again = False


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A server, reached over TCP only (as a process on another host reaches it: a Unix
    socket is never reset, and gets no receipts)."""
    monkeypatch.setattr(client_module, "connect", lambda address, timeout:
                        socket.create_connection(split_address(address), timeout))
    srv = Server("127.0.0.1", name="fiber-test-receipts")
    yield srv
    srv.close()


def _reset(c: Client) -> None:
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


def _ask_then_reset(srv: Server, name: bytes, asked: bytes) -> None:
    first = Client(srv.address, timeout=10)
    first.send_message([name, b"op", asked])
    time.sleep(0.05)  # it reached the server, whose answer is on its way
    _reset(first)


def test_a_request_asked_again_while_served_is_answered_once_on_the_new_connection(server):
    service = _Slow()
    server.register(b"slow", service)
    asked = receipts.ticket()
    _ask_then_reset(server, b"slow", asked)
    again = Client(server.address, timeout=10)
    assert again.request(b"slow", b"op", ticket=asked, timeout=10) == (b"ok", [b"1"])
    assert service.served == 1
    # asked once more (its answer lost again): the same answer, not a second run
    _reset(again)
    third = Client(server.address, timeout=10)
    assert third.request(b"slow", b"op", ticket=asked, timeout=10) == (b"ok", [b"1"])
    # the caller's next request is a new one: served
    assert third.request(b"slow", b"op", ticket=receipts.ticket(), timeout=10) == (
        b"ok", [b"2"])
    assert service.served == 2
    third.close()


def test_answers_are_forgotten_when_their_connection_ends_cleanly(server):
    """A connection closed cleanly (its process closed it or ended) asks nothing again:
    its callers' answers are dropped at once, not kept."""
    service = _Slow()
    server.register(b"slow", service)
    c = Client(server.address, timeout=10)
    assert c.request(b"slow", b"op", ticket=receipts.ticket(), timeout=10)[0] == b"ok"
    assert len(server.receipts) == 1
    c.close()
    deadline = time.monotonic() + 10
    while len(server.receipts) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(server.receipts) == 0


def test_a_service_that_does_not_answer_again_serves_a_ticket_twice(server):
    """Receipts are the service's choice (``answers_again``): without it, a request with
    a ticket is an ordinary request (the server keeps nothing)."""
    service = _Dropping()
    server.register(b"dropping", service)
    asked = receipts.ticket()
    _ask_then_reset(server, b"dropping", asked)
    again = Client(server.address, timeout=10)
    assert again.request(b"dropping", b"op", ticket=asked, timeout=10)[0] == b"ok"
    assert service.served == 2 and len(server.receipts) == 0
    again.close()
