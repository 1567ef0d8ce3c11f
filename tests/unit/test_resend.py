"""A TCP connection reset while both ends live loses no message sent without a reply
(issue 30; see fiber.transport._resend): the server says how many it read of the old
connection, the client sends the rest first on its next connection.

The reset is the kernel's own (``ss -K``, which needs root: without it the test is
unusable, a failure under CI=true). The server is made to stop reading for a while, so
that when the reset comes its receive buffer is full and most messages are still in the
client's send queue, unacknowledged: lost with the connection unless sent again.
"""

from __future__ import annotations

import errno
import queue
import socket
import time
from typing import Any, List

import pytest

import fiber
from fiber._core import _runtime
from fiber._process_state import here
from fiber.queues._lending import Lease
from fiber.testing.conformance.support.waiting import wait_until
from fiber.transport import _resend, channels, sockets
from fiber.transport import client as client_module
from fiber.transport.client import Client, ConnectionLost
from fiber.transport.operations import Service, handles
from fiber.transport.serialization import loads

from support.tcp_proxy import abort

N = 2000
PAYLOAD = b"x" * 1000
SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


class _Recorder(Service):
    protocol = "test"

    def __init__(self) -> None:
        self.got: List[int] = []

    @handles(b"stall")
    def stall(self, server: Any, peer: Any, req_id: bytes, payload: List[Any]) -> None:
        time.sleep(float(bytes(payload[0])))  # the server reads nothing meanwhile

    @handles(b"one")
    def one(self, server: Any, peer: Any, req_id: bytes, payload: List[Any]) -> None:
        self.got.append(int(bytes(payload[0])))



@pytest.mark.parametrize("resend", [True, False], ids=["resent", "without"])
def test_messages_a_reset_lost_arrive_once_in_order_on_the_next_connection(resend,
                                                                          monkeypatch):
    # TCP, as between hosts: a client on the server's host would take its Unix socket
    monkeypatch.setattr(client_module, "connect", lambda address, timeout, unix=True:
                        socket.create_connection(sockets.split_address(address), timeout))
    hub = _runtime.hub()
    name = b"resend-test-%d" % resend
    recorder = _Recorder()
    hub.register(name, recorder)
    try:
        client = Client(hub.address, timeout=10)
        # room for every message in the client's send queue (FORCE: past wmem_max,
        # which is 208 KiB on a stock kernel; root, as ss -K needs)
        client.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
        client.send(name, b"stall", [b"2.0"])
        for i in range(N):
            client.send(name, b"one", [b"%d" % i, PAYLOAD])
        acked = _resend.bytes_acked(client.sock)
        abort(client.sock)
        with pytest.raises(ConnectionLost):
            client.send(name, b"one", [b"-1", PAYLOAD])  # finds the reset: not sent
        if not resend:  # what the client would do without _resend: nothing
            _resend.take_orphans(hub.address)
        client.close()
        again = Client(hub.address, timeout=10)
        again.send(name, b"one", [b"%d" % N, PAYLOAD])
        if resend:
            wait_until(lambda: len(recorder.got) >= N + 1, 30, 0.05, "every message")
            time.sleep(0.5)  # none more
            assert recorder.got == list(range(N + 1))
        else:
            wait_until(lambda: recorder.got[-1:] == [N], 30, 0.05, "the last message")
            assert len(recorder.got) < N // 2, len(recorder.got)  # the reset did lose some
        assert acked is not None and acked < N * len(PAYLOAD) // 2  # most unacknowledged
        again.close()
    finally:
        hub.unregister(name)


def _tcp(monkeypatch) -> None:
    """Connections over TCP, as between hosts (a client on the server's host would
    take its Unix socket, which no link resets)."""
    monkeypatch.setattr(client_module, "connect", lambda address, timeout, unix=True:
                        socket.create_connection(sockets.split_address(address), timeout))


def test_a_reset_that_another_threads_check_finds_first_keeps_its_errno(monkeypatch):
    """Every new connection first closes the process's connections that have ended
    (`prune_closed`), peeking at each: reading a reset socket's error clears it, so the
    connection's own reader then finds a plain end. The errno is kept on the client:
    a queue's lease tells a reset from the hub's end by it (before, 0)."""
    _tcp(monkeypatch)
    hub = _runtime.hub()
    client = Client(hub.address, timeout=10)
    here.transport.all_clients.add(client)
    try:
        client.request(_resend.RESEND_SERVICE, _resend.ResendOps.SYNC, [], timeout=10)
        abort(client.sock)
        assert channels.prune_closed() >= 1
        assert client.lost and client.error == errno.ECONNABORTED, client.error
    finally:
        client.close()
        _resend.take_orphans(hub.address)


def test_a_lease_whose_connection_ends_while_it_lives_settles_at_once(monkeypatch):
    """Issue 30: a consumer's lease (items lent ahead by the queue's hub) whose
    connection ended while it lives sends ``settle`` on a new connection, so that what
    it held and did not take goes back to the queue at once. The end here is the hub's
    own, as a reset: what it does to an old connection when another connection of the
    consumer says it was reset (`fiber.transport._resend`), or a reset whose errno
    another thread's check read first. The lease then read a plain end and sent
    nothing, and the hub held those items for `Loans.SETTLE_WAIT_S` (60 s) while the
    consumer lived: a ``get`` elsewhere found the queue empty."""
    _tcp(monkeypatch)
    hub = _runtime.hub()
    q = fiber.Queue()
    for i in range(40):
        q.put(i)
    lease = Lease(q.hub_address, q.service_name, 40)
    try:
        wait_until(lambda: lease.held() == 40, 30, 0.01, "the items lent")
        assert loads(lease.take(True, 5)) == 0
        client = lease._client
        assert client is not None
        hub.call_soon(lambda: hub.end_peer(client.peer_id))
        wait_until(lambda: client.lost, 10, 0.01, "the lease's connection ended")
        assert client.error == 0  # a plain end, as the lease reads it
        # the 39 it did not take: back in the queue within a few seconds, each once
        deadline = time.monotonic() + 3.0
        back = [q.get(timeout=max(0.01, deadline - time.monotonic())) for _ in range(39)]
        assert back == list(range(1, 40))
        with pytest.raises(queue.Empty):
            q.get(timeout=1)
    finally:
        lease.close()
        _resend.take_orphans(hub.address)
