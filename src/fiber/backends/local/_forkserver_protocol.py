"""What the local backend's fork server and its template process share: the JSON
message framing over their private ``SOCK_SEQPACKET`` socketpair, the template's module,
and the signals a forked child never resets.

Its own module, imported by both sides: the template runs as ``python -m`` of its module,
which the ``fiber.backends.local`` package (imported first) must therefore not import.
"""

from __future__ import annotations

import array
import json
import os
import socket
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["MODULE", "MAX_MESSAGE", "UNTOUCHED_SIGNALS", "ForkOps", "send_message",
           "recv_message"]


class ForkOps:
    """The fork server protocol's messages (the ``op`` of each JSON object)."""

    INIT = "init"  # master -> template: preload these, with this path and argv
    READY = "ready"  # template -> master: preloaded (its pid, what it could not import)
    ERROR = "error"  # template -> master: it cannot serve (it exits)
    FORK = "fork"  # master -> template: fork a job (+ its stdout/stderr, inherited fds)
    FORKED = "forked"  # template -> master: the job's pid (+ a pidfd of it)
    FORK_FAILED = "fork_failed"  # template -> master: fork() failed
    EXIT = "exit"  # template -> master: a job it forked exited, with its code

#: The module the template runs (``python -m``); tests find the template by it.
MODULE = "fiber.backends.local._forkserver_template"
#: Largest message either side sends (a fork request with its environment).
MAX_MESSAGE = 1 << 20
#: Signals a forked child leaves as they are (cannot be caught, or Python's own setup).
UNTOUCHED_SIGNALS = frozenset({"SIGKILL", "SIGSTOP", "SIGPIPE", "SIGXFSZ", "SIGXFZ"})

_FD_SPACE = socket.CMSG_SPACE(8 * array.array("i").itemsize)


def send_message(sock: socket.socket, obj: Mapping[str, object], fds: Sequence[int] = ()) -> None:
    """Send one message, with ``fds`` passed as SCM_RIGHTS."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"the request is larger than {MAX_MESSAGE} bytes")
    if fds:
        sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                               array.array("i", fds).tobytes())])
    else:
        sock.sendall(data)


def recv_message(sock: socket.socket, bufsize: int) -> Optional[Tuple[Dict[str, Any], List[int]]]:
    """One message and the fds that came with it; None at EOF."""
    data, ancdata, flags, _ = sock.recvmsg(bufsize, _FD_SPACE, socket.MSG_CMSG_CLOEXEC)
    fds: List[int] = []
    for level, kind, cdata in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(cdata[:len(cdata) - len(cdata) % a.itemsize])
            fds.extend(a)
    if not data and not fds:
        return None
    try:
        if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
            raise ValueError("truncated message")
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("bad message")
    except ValueError:
        for fd in fds:
            os.close(fd)
        raise
    return obj, fds
