"""TCP sockets as fiber uses them: no Nagle delay, and a dead peer noticed within seconds.

A peer process that ends closes its sockets, which the other side sees at once (EOF). A
peer whose host died or was cut off is found by TCP keepalive probes (idle ``interval``
seconds, then probes every ``interval`` until ``timeout``) and, while data is unacked,
by ``TCP_USER_TIMEOUT``.
"""

from __future__ import annotations

import socket
from typing import Tuple

__all__ = ["tune", "listen", "connect", "split_address"]


def tune(sock: socket.socket, heartbeat_s: float, timeout_s: float) -> None:
    """Options shared by every fiber connection."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    interval = max(1, int(round(heartbeat_s)))
    count = max(1, int(round(timeout_s / interval)))
    for name, value in (("TCP_KEEPIDLE", interval), ("TCP_KEEPINTVL", interval),
                        ("TCP_KEEPCNT", count),
                        ("TCP_USER_TIMEOUT", int(timeout_s * 1000))):
        opt = getattr(socket, name, None)
        if opt is not None:
            sock.setsockopt(socket.IPPROTO_TCP, opt, value)


def split_address(address: str) -> Tuple[str, int]:
    """``tcp://host:port`` (or ``tcp://[v6]:port``) to ``(host, port)``."""
    if not address.startswith("tcp://"):
        raise ValueError(f"not a fiber address: {address!r}")
    hostport = address[len("tcp://"):]
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def listen(host: str) -> Tuple[socket.socket, str]:
    """A listening socket on ``host`` and a random port, and its ``tcp://`` address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.bind((host, 0))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return sock, f"tcp://{shown}:{port}"


def connect(address: str, timeout: float) -> socket.socket:
    host, port = split_address(address)
    return socket.create_connection((host, port), timeout=timeout)
