"""``connection.wait`` over connections of several hubs (fiber.connection._wait), with
real sockets and a real selector; the hubs' addresses are stand-ins (``get_client`` is
replaced), the rest is the module's own code.

Making the connection to the second hub prunes the cached clients whose server has gone
(`prune_closed`): the first hub's client, already watched, is closed under the wait."""

from __future__ import annotations

import os
import socket
import time
from typing import Any, List

import pytest

from fiber._process_state import here
from fiber.connection import _wait
from fiber.transport import channels
from fiber.transport import client as transport_client


class _Conn:
    """A connection of a hub, as the wait sees it (its hub answers for it)."""

    def poll(self, timeout: float) -> bool:
        return False


@pytest.mark.parametrize("reused", [True, False], ids=["number-reused", "number-free"])
def test_a_hub_whose_client_is_closed_under_the_wait_still_ends_it(monkeypatch, reused):
    mine, theirs = socket.socketpair()
    gone = transport_client.Client("hub-a", adopted=mine)
    here.transport.all_clients.add(gone)
    monkeypatch.setattr(gone, "start", lambda *args, **kwargs: b"1")  # asked, not answered
    theirs.close()  # hub A has ended; its client does not know yet
    kept: List[Any] = []

    def get_client(address: str, timeout: Any = None) -> Any:
        if address == "hub-a":
            return gone
        channels.prune_closed()  # as a new connection does: closes A's socket
        if not reused:  # something else takes A's number first
            kept.append(os.open(os.devnull, os.O_RDONLY))
        ours, server = socket.socketpair()
        kept.extend([ours, server])
        other = transport_client.Client("hub-b", adopted=ours)
        monkeypatch.setattr(other, "start", lambda *args, **kwargs: b"2")
        return other

    monkeypatch.setattr(_wait, "get_client", get_client)
    monkeypatch.setattr(_wait, "_frames", lambda conns, timeout: [])
    a, b = _Conn(), _Conn()
    t0 = time.monotonic()
    try:
        ready = _wait._Multiplexed({"hub-a": [a], "hub-b": [b]}, []).wait(5)
    finally:
        for k in kept:
            if isinstance(k, int):
                os.close(k)
            else:
                k.close()
    assert gone.sock.fileno() < 0  # it was closed under the wait
    assert ready == {id(a)}  # hub A's end: its connection is ready (recv raises EOFError)
    assert time.monotonic() - t0 < 2
