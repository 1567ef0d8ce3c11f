"""Connections to the hubs of this program, with the program's settings.

The transport takes its settings as arguments (`fiber.transport.client.Settings`):
these are its client functions with the program's configuration
(`fiber.config.get_config`, read again at each use) as those settings. Everything
above the transport reaches other processes' hubs through them.
"""

from __future__ import annotations

import socket
from typing import Optional

from ..config import get_config
from ..transport import channels
from ..transport import client as transport_client
from ..transport.client import Client
from ..transport.local import Channel

__all__ = ["get_client", "own_client", "plain_client", "ensure_anchor", "adopt_anchor"]


def get_client(address: str, timeout: Optional[float] = None) -> Channel:
    """This thread's client for ``address`` (see
    `fiber.transport.channels.get_client`).

    Raises:
        ConnectionLost, TransportError: the server cannot be reached.
        AuthenticationError: the server does not hold the program's secret.
    """
    return channels.get_client(address, timeout, settings=get_config)


def own_client(address: str, timeout: Optional[float] = None) -> Client:
    """A connection to ``address`` for the caller alone (see
    `fiber.transport.channels.own_client`).

    Raises:
        ConnectionLost, TransportError, AuthenticationError: as `get_client`.
    """
    return channels.own_client(address, timeout, settings=get_config)


def plain_client(address: str, timeout: Optional[float] = None) -> Client:
    """A connection to ``address`` that is not this process's anchor, and makes none: a
    job's output relay's (see fiber.process._relay), a process that is not the job.

    Raises:
        ConnectionLost, TransportError, AuthenticationError: as `get_client`.
    """
    if timeout is None:
        timeout = transport_client.connect_timeout(get_config, address)
    return Client(address, timeout=timeout, settings=get_config)


def ensure_anchor(address: str, timeout: Optional[float] = None) -> Client:
    """The connection that tells the server at ``address`` this process is alive (see
    `fiber.transport.channels.ensure_anchor`)."""
    return channels.ensure_anchor(address, timeout, settings=get_config)


def adopt_anchor(address: str, sock: socket.socket, process_id: bytes) -> Client:
    """This process's anchor to the server at ``address``: ``sock``, handed to it at its
    start (see `fiber.transport.channels.adopt_anchor`)."""
    return channels.adopt_anchor(address, sock, process_id, settings=get_config)
