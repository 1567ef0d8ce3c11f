"""Sockets as fiber uses them: no Nagle delay, and a dead peer noticed within seconds.

A server listens on TCP, for every host, and on a Linux abstract Unix socket, whose name
is part of its address (``tcp://10.0.0.5:4242/unix=fiber-1a2b``). Abstract names belong to
a network namespace, so a client that can reach the name is on the same host (or in the
same container network) and connects there: a round trip costs about two thirds of one
over loopback TCP. Elsewhere the name is unknown and the client uses TCP.

A peer process that ends closes its sockets, which the other side sees at once (EOF). A
peer whose host died or was cut off is found by TCP keepalive probes (idle ``interval``
seconds, then probes every ``interval`` until ``timeout``) and, while data is unacked,
by ``TCP_USER_TIMEOUT``.
"""

from __future__ import annotations

import errno
import secrets
import select
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, TypeVar

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

__all__ = ["tune", "listen", "connect", "split_address", "readable", "open_file_limits",
           "tcp_rtt", "ended_with", "reset_on_close"]

_TRANSIENT = (errno.EHOSTUNREACH, errno.ENETUNREACH)
_RETRY_PAUSE_S = 0.1


def reset_on_close(sock: socket.socket) -> None:
    """Make ``sock``'s close a reset (RST), not an end (FIN): its peer, which may live,
    takes it as a link's reset (it connects again, resends, resumes) rather than as the
    end of the process at this end."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


def tune(sock: socket.socket, heartbeat_s: float, timeout_s: float) -> None:
    """Options shared by every fiber connection (TCP ones: Unix sockets need none)."""
    if sock.family == socket.AF_UNIX:
        return
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


#: ``struct tcp_info`` (Linux, include/uapi/linux/tcp.h): 8 bytes of flags, then u32
#: fields, ``tcpi_rtt`` (microseconds, smoothed) the 16th of them.
_TCPI_RTT = struct.Struct("<I")
_TCPI_RTT_OFFSET = 8 + 15 * 4


def tcp_rtt(sock: socket.socket) -> Optional[float]:
    """The kernel's smoothed round trip of the TCP connection ``sock`` (seconds), as TCP
    measures it from its own acknowledgements: unaffected by how late either process
    reads what arrives. None where there is none (not TCP, no sample yet, not Linux)."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not hasattr(socket, "TCP_INFO"):
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except OSError:
        return None
    if len(info) < _TCPI_RTT_OFFSET + 4:
        return None
    (rtt_us,) = _TCPI_RTT.unpack_from(info, _TCPI_RTT_OFFSET)
    return rtt_us * 1e-6 if rtt_us else None


def split_address(address: str) -> Tuple[str, int]:
    """``tcp://host:port[/unix=name]`` (or ``tcp://[v6]:port``) to ``(host, port)``."""
    if not address.startswith("tcp://"):
        raise ValueError(f"not a fiber address: {address!r}")
    hostport = address[len("tcp://"):].split("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    return host.strip("[]"), int(port)


def server_id(address: str) -> str:
    """The unique name of the server at ``address`` ("" if its address has none)."""
    return _unix_name(address) or ""


def _unix_name(address: str) -> Optional[str]:
    _, _, rest = address[len("tcp://"):].partition("/unix=")
    return rest or None


#: Connections a listening socket queues before they are accepted (the kernel caps it at
#: ``net.core.somaxconn``): every worker of a pool of 1,024 connects at about once.
BACKLOG = 8192


def listen(host: str, port: int = 0) -> Tuple[List[socket.socket], str]:
    """Listening sockets (TCP on ``host`` and ``port``, 0: a free one, and an abstract
    Unix socket where the platform has them) and the address that names both."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        if port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    address = f"tcp://{shown}:{port}"
    socks = [sock]
    if sys.platform.startswith("linux"):
        name = f"fiber-{secrets.token_hex(8)}"
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unix.bind("\0" + name)
            unix.listen(BACKLOG)
            socks.append(unix)
            address += f"/unix={name}"
        except OSError:
            unix.close()
    return socks, address


def connect(address: str, timeout: float, unix: bool = True) -> socket.socket:
    """A connection to ``address``: its Unix socket when reachable (and ``unix``), else
    TCP."""
    name = _unix_name(address) if unix else None
    if name is not None:
        local = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            local.settimeout(timeout)
            local.connect("\0" + name)
            return local
        except OSError:
            local.close()
    host, port = split_address(address)
    # A route or neighbour entry can be missing for a while: a pod's network set up just
    # now, its IP reused from a pod deleted a moment ago, or a lossy link on which the
    # neighbour's address resolution failed (three lost probes: "No route to host").
    # That is retried until ``timeout``, the grace a silent peer gets (see
    # `fiber.config.Config.heartbeat_timeout`). A refused connection is not retried:
    # nothing listens there.
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return socket.create_connection((host, port), timeout=max(0.1, left))
        except OSError as e:
            if e.errno not in _TRANSIENT or left <= _RETRY_PAUSE_S:
                raise
        time.sleep(_RETRY_PAUSE_S)


#: A descriptor, or an object with ``fileno()``.
_Fd = TypeVar("_Fd", bound="FileDescriptorLike")


def readable(fds: Sequence[_Fd], timeout: Optional[float]) -> List[_Fd]:
    """Those of ``fds`` (descriptors, or objects with ``fileno()``) readable within
    ``timeout`` seconds (None: no limit), in their order.

    ``poll``, not ``select.select``: select cannot watch a descriptor numbered 1024 or more,
    which a master of a few hundred workers holds.
    """
    poller = select.poll()
    by_fd = {}
    for f in fds:
        fd = f if isinstance(f, int) else f.fileno()
        by_fd[fd] = f
        poller.register(fd, select.POLLIN)
    events = poller.poll(None if timeout is None else max(0, int(timeout * 1000 + 0.999)))
    ready = {fd for fd, mask in events if mask}
    return [f for fd, f in by_fd.items() if fd in ready]


def open_file_limits() -> str:
    """This process's open-file limits, for a message about running out of descriptors
    (``open-file limit 1024, hard limit 524288``)."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return "the open-file limit"
    shown = ["unlimited" if v == resource.RLIM_INFINITY else str(v) for v in (soft, hard)]
    return f"open-file limit {shown[0]}, hard limit {shown[1]}"


def ended_with(sock: socket.socket) -> Optional[int]:
    """None while the connection of ``sock`` is open; once it has ended, the errno that
    ended it (0: its peer's end, or the socket closed here meanwhile).

    Kept, not swallowed: reading a reset socket's error clears it, so its own reader
    then finds a plain end (a queue's lease, which settles after a reset only)."""
    try:
        if not readable([sock], 0):
            return None
        # not blocking: a thread of the client's own (a queue's lease) may have read
        # what made the socket readable in between
        return 0 if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"" else None
    except BlockingIOError:
        return None
    except OSError as e:
        return e.errno or 0
    except ValueError:  # closed here
        return 0
