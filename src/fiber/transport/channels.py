"""Which connection each thread of a process uses to each server: its cached `Client`
(`get_client`), one of its own (`own_client`), and the process's *anchor* to each server
(`ensure_anchor`), whose end tells that server the process is gone (see docs/contributing/
architecture.md, "The transport"). A forked child forgets its parent's (`_forget_in_child`).
"""

from __future__ import annotations

import os
import socket
import threading
import weakref
from typing import Dict, Optional

from .._process_state import here
from . import _resend
from .client import Client, connect_timeout, renew_process_id
from .local import Channel, LocalClient, local_server
from .settings import SettingsSource

__all__ = ["get_client", "own_client", "ensure_anchor", "current_anchor", "adopt_anchor",
           "prune_closed", "close_all", "deliver_orphans_now"]

# This thread's channels, every connection, the anchors and their lock, the addresses
# that timed out: in ``here.transport`` (``fiber._state.transport``).


def get_client(address: str, timeout: Optional[float] = None, *,
               settings: SettingsSource) -> Channel:
    """This thread's client for ``address``, connected and authenticated on first use,
    with the ``settings`` given when it was made.

    Raises:
        ConnectionLost, TransportError: the server cannot be reached.
        AuthenticationError: the server does not hold the program's secret.
    """
    state = here.transport
    cache: Optional[Dict[str, Channel]] = getattr(state.thread_clients, "clients", None)
    if cache is None:
        cache = state.thread_clients.clients = {}
    client = cache.get(address)
    if client is not None and not client.lost:
        return client
    server = local_server(address)
    if server is not None and server.alive:
        client = cache[address] = LocalClient(server, settings)
        return client
    if isinstance(client, Client):  # lost (a LocalClient never is)
        client.close()
    prune_closed()
    limit = connect_timeout(settings, address)
    timeout = limit if timeout is None else max(0.1, min(timeout, limit))
    anchor = ensure_anchor(address, timeout, settings=settings)
    with state.anchor_lock:
        if not anchor.taken and not anchor.lost:
            # The anchor carries this thread's calls too: one connection, one handshake
            # fewer for every job (its lifeline watches the anchor without reading it).
            anchor.taken = True
            cache[address] = anchor
            return anchor
    client = cache[address] = Client(address, timeout=timeout, settings=settings)
    state.all_clients.add(client)
    return client


def own_client(address: str, timeout: Optional[float] = None, *,
               settings: SettingsSource) -> Client:
    """A connection to ``address`` for the caller alone, not this thread's cached one.

    For a channel on which the server also pushes messages nobody asked for (a pool's
    tasks): `Client.request` drops what is not a reply, so user code that calls
    the same server through `get_client` on that thread must not share it.

    Raises:
        ConnectionLost, TransportError, AuthenticationError: as `get_client`.
    """
    if timeout is None:
        timeout = connect_timeout(settings, address)
    ensure_anchor(address, timeout, settings=settings)
    client = Client(address, timeout=timeout, settings=settings)
    here.transport.all_clients.add(client)
    return client


def ensure_anchor(address: str, timeout: Optional[float] = None, *,
                  settings: SettingsSource) -> Client:
    """The connection that tells the server at ``address`` this process is alive.

    It is closed only when the process ends (or the connection fails): its end is how
    the server learns that the process is gone. It may carry one thread's calls (see
    `get_client`); whoever watches it for its end must not read from it.
    """
    state = here.transport
    with state.anchor_lock:
        anchor = state.anchors.get(address)
        if anchor is None or anchor.lost:
            anchor = state.anchors[address] = Client(
                address, anchor=True, settings=settings,
                timeout=connect_timeout(settings, address) if timeout is None else timeout)
            state.all_clients.add(anchor)
        return anchor


def current_anchor(address: str) -> Optional[Client]:
    """This process's anchor to ``address`` as it is (lost or not), without connecting."""
    state = here.transport
    with state.anchor_lock:
        return state.anchors.get(address)


def adopt_anchor(address: str, sock: socket.socket, process_id: bytes, *,
                 settings: SettingsSource) -> Client:
    """Make ``sock`` this process's anchor to the server at ``address``, as the process
    ``process_id`` (this process's id from now on): its end of a socket pair whose other
    end that server serves (see `fiber.transport.server.Server.adopt`), handed to
    it at its start, before it made any connection."""
    state = here.transport
    state.process_id = process_id
    sock.set_inheritable(False)
    anchor = Client(address, anchor=True, settings=settings, adopted=sock)
    with state.anchor_lock:
        state.anchors[address] = anchor
        state.all_clients.add(anchor)
    return anchor


def prune_closed() -> int:
    """Close cached connections whose server has gone away; returns how many.

    Called whenever a new connection is made, so that a long-running program that talks
    to many short-lived servers does not keep their dead sockets open.
    """
    closed = 0
    for client in list(here.transport.all_clients):
        if client.found_ended():
            if client.sock.fileno() >= 0:
                closed += 1
            client.close()
    return closed


def deliver_orphans_now() -> None:
    """A last try to deliver what a reset connection lost (see `_resend`): at the
    process's exit, each server that has some gets a new connection, which sends them."""
    _resend.deliver_orphans(lambda address: Client(address, timeout=5.0))


def close_all() -> None:
    """Close this thread's clients and every anchor (at process exit), after a last try
    to deliver what a reset connection lost (`deliver_orphans_now`)."""
    deliver_orphans_now()
    state = here.transport
    cache = getattr(state.thread_clients, "clients", None) or {}
    for client in cache.values():
        if isinstance(client, Client) and not client.taken:
            client.close()
    cache.clear()
    with state.anchor_lock:
        for anchor in state.anchors.values():
            try:
                anchor.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            anchor.close()
        state.anchors.clear()


def _forget_in_child() -> None:
    """In a child forked from a process that had connections (a pool's job forking its
    workers, a user's ``os.fork`` or ``fork`` start method): none of them is the
    child's. Reading or writing one would mix its messages with the parent's, and its
    anchor would tell the server the parent's id. The child closes its copies of their
    descriptors (only those: the parent's connections live on, no shutdown), forgets
    them, and takes an id of its own: it connects anew, as a process of its own."""
    state = here.transport
    for client in (list(state.all_clients)
                   + list(getattr(state.thread_clients, "clients", {}).values())):
        sock = getattr(client, "sock", None)
        if sock is not None:
            try:
                os.close(sock.detach())
            except OSError:
                pass
            client.lost = True
    state.thread_clients = threading.local()
    state.anchors.clear()
    state.anchor_lock = threading.Lock()
    state.all_clients = weakref.WeakSet()
    state.unanswered = {}
    state.unanswered_lock = threading.Lock()
    _resend.forget_in_child()
    renew_process_id()


here.after_fork_in_child(_forget_in_child)
