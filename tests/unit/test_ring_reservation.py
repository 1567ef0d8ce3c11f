"""Rank 0's reservation of the rendezvous port (fiber.ring._rendezvous.reserve_port)."""

from __future__ import annotations

import socket

import pytest

from fiber.ring._rendezvous import reserve_port


def test_a_reserved_port_refuses_early_connections_instead_of_resetting_them():
    """Without a store on it, the other ranks may connect before rank 0 frees the port:
    a listening reservation queued them and reset them as it closed (torch 2.1's store
    client gives up on a reset), a bound one refuses them, which the client tries
    again."""
    reserved = reserve_port("127.0.0.1")
    port = reserved.getsockname()[1]
    try:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
        for reuse in (False, True):  # a store sets SO_REUSEADDR: the port stays ours
            other = socket.socket()
            if reuse:
                other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError):
                other.bind(("127.0.0.1", port))
            other.close()
    finally:
        reserved.close()
    freed = socket.socket()  # once freed, the user's store binds it
    freed.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    freed.bind(("127.0.0.1", port))
    freed.close()


def test_a_reservation_for_a_store_listens():
    reserved = reserve_port("127.0.0.1", listen=True)
    try:
        socket.create_connection(reserved.getsockname(), timeout=5).close()
    finally:
        reserved.close()
