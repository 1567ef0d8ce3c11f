"""What runs in each ring member: the member's half of the rendezvous, then the function.

See `fiber.ring._ring` for the messages. Rank 0 reserves the rendezvous port on its
own host before it says hello, and keeps it reserved: when torch is importable there it
starts torch's ``TCPStore`` server on the very socket it bound (``master_listen_fd``),
so that the port is never free between its reservation and its use, and every rank,
rank 0 included, connects to it as a client (``TORCHELASTIC_USE_AGENT_STORE=True``, as
under torchrun, whose agent hosts the store). Without torch (or with
``torch_store=False``) it holds the bound socket until the environment is set and closes
it just before the user's code runs; whoever binds the port then (a store the user starts,
Horovod...) may find it taken by another program in that short window, as with torchrun's
own ``get_free_port``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import socket
import sys
from typing import Callable, Dict, Optional, Tuple

from .._process_state import here
from ..connection import Connection
from ..transport.remote import pack_exception
from ._rendezvous import Hello, member_address, reserve_port, socket_ifname

__all__ = ["RingMember", "current_member", "member_main"]


@dataclasses.dataclass(frozen=True)
class RingMember:
    """The ring as one member sees it (`current_member`)."""

    rank: int
    size: int
    restart: int  # how often the ring was re-formed before this run (0 at first)
    addresses: Tuple[str, ...]  # the address of each rank, by rank
    master_port: int  # the rendezvous port, on addresses[0]


def current_member() -> Optional[RingMember]:
    """In a ring member, once the rendezvous is done: the ring as it sees it; else None."""
    return here.api.ring_member


def _wants_store(torch_store: Optional[bool]) -> bool:
    if torch_store is None:
        return importlib.util.find_spec("torch") is not None
    return torch_store


def _start_store(sock: socket.socket, address: str, size: int, required: bool) -> bool:
    """Start torch's TCPStore server on ``sock`` (which it then owns); False if this torch
    cannot (it predates ``master_listen_fd``) and ``required`` is False."""
    from torch.distributed import TCPStore  # type: ignore[attr-defined, unused-ignore]

    port = sock.getsockname()[1]
    try:
        store = TCPStore(address, port, size, True, wait_for_workers=False,
                         master_listen_fd=sock.fileno())
    except TypeError:
        if required:
            raise
        return False
    sock.detach()  # the store closes the descriptor
    here.api.ring_stores.append(store)
    return True


def _hello(rank: int, size: int, torch_store: Optional[bool]
           ) -> Tuple[Hello, Optional[socket.socket]]:
    """This member's hello, and on rank 0 the reserved socket if it still holds it."""
    address = member_address()
    if rank != 0:
        return Hello(address, None, False), None
    store = _wants_store(torch_store)
    sock = reserve_port(address, listen=store)
    port = sock.getsockname()[1]
    try:
        if store and _start_store(sock, address, size, bool(torch_store)):
            return Hello(address, port, True), None
    except BaseException:
        sock.close()
        raise
    return Hello(address, port, False), sock


def _install(env: Dict[str, str], address: str) -> None:
    """Set the rendezvous environment; the interface variables only where the user's
    environment did not choose one."""
    ifname = socket_ifname(address)
    if ifname is not None:
        for var in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            if var not in os.environ:
                env[var] = ifname
    os.environ.update(env)


def member_main(rank: int, size: int, conn: Connection, func: Callable[..., object],
                args: Tuple[object, ...], kwargs: Dict[str, object],
                torch_store: Optional[bool]) -> None:
    """The target of a member's process: rendezvous, then ``func(rank, size, *args,
    **kwargs)``, whose return value (or exception) goes back to the ring."""
    try:
        hello, reserved = _hello(rank, size, torch_store)
    except Exception as e:
        conn.send(("error", pack_exception(e)))
        raise
    conn.send(("hello", hello))
    try:
        _, env, addresses, restart = conn.recv()
    except EOFError:  # the ring was ended before its rendezvous completed
        sys.exit(1)
    _install(env, hello.address)
    here.api.ring_member = RingMember(rank, size, restart, tuple(addresses),
                                      int(env["MASTER_PORT"]))
    if reserved is not None:
        reserved.close()  # just before the user's code binds it (see the module's doc)
    try:
        result = func(rank, size, *args, **kwargs)
        conn.send(("done", result))
    except Exception as e:  # SystemExit passes: the exit code tells the ring
        conn.send(("error", pack_exception(e)))
        raise
    finally:
        conn.close()
