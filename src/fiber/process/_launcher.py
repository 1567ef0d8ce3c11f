"""Launching a job-backed process: the parent's side and the child's bootstrap.

::

    parent                                         child job (python -m fiber.process._bootstrap)
    ──────                                         ──────────────────────────────────────
    Process.start()
      payload = dumps(config, process, ...)
      LaunchService.add(token, payload)
      backend.submit(JobSpec(cmd, env={FIBER_PARENT=hub address,
                                       FIBER_JOB=token, FIBER_SECRET}))
                                                   connect to hub, authenticate (anchor)
           hub "proc" ◀──── fetch(token, pid, host) ─┤
           hub ─────────── payload ─────────────────▶ run process.run()
           hub "proc" ◀── output_start, output(...) ─┤ its fds 1, 2 (see _output: printed
                      ◀── source(filename) ──────────┤ here, prefixed, by _printer); the
                                                     │ lines of a traceback's file it lacks
           hub "proc" ◀──── output_end ──────────────┤ (replied: all its output is here)
           hub "proc" ◀──── exit(token, exitcode) ───┤ exit
      backend watcher ── job finished ──▶ Process._finish(status)

The anchor connection doubles as the child's lifeline: when it drops (the parent exited,
was killed, or its host became unreachable for ``heartbeat_timeout`` seconds) the child's
watchdog ends the child, so fiber never leaves orphan jobs on a cluster.
"""

from __future__ import annotations

import linecache
import os
import socket
import threading
from typing import Any, Callable, Dict, List, Optional

from .._core import _runtime
from ..config import get_config
from ..transport.serialization import dumps, loads
from ..transport.server import Peer, Server, Service
from ._printer import OutputPrinter

__all__ = ["LaunchService", "launcher", "Launch"]

SERVICE = b"proc"
_SOURCE_TIMEOUT_S = 5.0


class Launch:
    """The parent's record of one child; callbacks run on the hub thread."""

    def __init__(self, payload: List[Any], on_started: Callable[[int, str], None],
                 on_exit_report: Callable[[int], None], on_gone: Callable[[], None],
                 name: str = "") -> None:
        self.payload = payload
        self.name = name
        self.host = ""
        self.on_started = on_started
        self.on_exit_report = on_exit_report
        self.on_gone = on_gone
        self.process_id: Optional[bytes] = None


class LaunchService(Service):
    """Hands children their payloads and hears their exit codes."""

    def __init__(self) -> None:
        self._launches: Dict[bytes, Launch] = {}
        self._by_process: Dict[bytes, bytes] = {}
        self._lock = threading.Lock()
        #: Children's forwarded output (see fiber.process._output), and the connection
        #: that carries each child's (peer id -> job token).
        self.printer = OutputPrinter()
        self._outputs: Dict[int, bytes] = {}

    def add(self, token: bytes, launch: Launch) -> None:
        with self._lock:
            self._launches[token] = launch

    def remove(self, token: bytes) -> None:
        """The job has ended (or was never submitted)."""
        with self._lock:
            launch = self._launches.pop(token, None)
            if launch is not None and launch.process_id is not None:
                self._by_process.pop(launch.process_id, None)
        self.printer.job_ended(token)

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        if op == b"source":
            _serve_source(server, peer, req_id, bytes(payload[0]).decode(errors="replace"))
            return
        token = bytes(payload[0])
        if op == b"output":  # the most frequent: a child's output as it reads it
            self.printer.write(token, int(bytes(payload[1])), bytes(payload[2]))
            return
        if op == b"output_end":  # (of a job that may have ended for its backend already)
            self._outputs.pop(peer.peer_id, None)
            self.printer.close(token)
            server.reply(peer, req_id, b"ok")
            return
        with self._lock:
            launch = self._launches.get(token)
        if launch is None and not req_id:
            return  # a one-way message of a job that has ended
        if launch is None:
            server.reply_error(peer, req_id, LookupError("unknown or finished job"))
            return
        if op == b"fetch":
            if launch.process_id is not None:  # a second copy of one job (a requeue)
                server.reply_error(peer, req_id, PermissionError("this job was already started"))
                return
            pid, host = loads(payload[1:])
            launch.host = host
            launch.process_id = peer.process_id
            with self._lock:
                self._by_process[peer.process_id] = token
            launch.on_started(pid, host)
            server.reply(peer, req_id, b"ok", launch.payload)
            launch.payload = []
        elif op == b"output_start":
            self._outputs[peer.peer_id] = token
            self.printer.open(token, launch.name, launch.host, get_config().output_prefix)
        elif op == b"exit":
            launch.on_exit_report(int(bytes(payload[1])))
            server.reply(peer, req_id, b"ok")
        else:
            server.reply_error(peer, req_id, ValueError(f"bad op {op!r}"))

    def peer_gone(self, server: Server, peer: Peer) -> None:
        token = self._outputs.pop(peer.peer_id, None)
        if token is not None:  # a job killed, or cut off, before the end of its output
            self.printer.close(token)

    def wait_output(self, token: bytes, timeout: float) -> bool:
        """Wait until the output of job ``token`` has all been written here (any thread)."""
        return self.printer.wait_closed(token, timeout)

    def wait_ended_output(self, timeout: float) -> bool:
        """Wait until the output of every job that has ended has been written here."""
        return self.printer.wait_ended(timeout)

    def process_gone(self, server: Server, process_id: bytes) -> None:
        with self._lock:
            token = self._by_process.pop(process_id, None)
            launch = self._launches.get(token) if token else None
        if launch is not None:
            launch.on_gone()


_service_lock = threading.Lock()
_service: Optional[LaunchService] = None
_service_hub: Optional[Server] = None


def launcher() -> LaunchService:
    """The launch service on this process's hub."""
    global _service, _service_hub
    hub = _runtime.hub()
    with _service_lock:
        if _service is None or _service_hub is not hub:
            _service = LaunchService()
            _service_hub = hub
            hub.register(SERVICE, _service)
        return _service


def _serve_source(server: Server, peer: Peer, req_id: bytes, filename: str) -> None:
    """Reply with the source of ``filename`` as this process's :mod:`linecache` has it
    (its file, a notebook's cell, or itself asked of its own parent): for the traceback
    of a job that lacks the file. On a thread of its own: reading may take a while, and
    never under the hub's lock."""

    def read() -> None:
        source = "".join(linecache.getlines(filename))
        with server.lock:
            server.reply(peer, req_id, b"ok", [source.encode("utf-8", "replace")])

    threading.Thread(target=read, name="fiber-source", daemon=True).start()


def fetch_source(parent: str, filename: str) -> Optional[str]:
    """In a job: the source of ``filename`` as the parent has it (None if it has none)."""
    from .._core._clients import get_client

    try:
        status, frames = get_client(parent).request(SERVICE, b"source", [filename.encode()],
                                                    timeout=_SOURCE_TIMEOUT_S)
    except Exception:
        return None
    text = bytes(frames[0]).decode("utf-8", "replace") if status == b"ok" and frames else ""
    return text or None


def fetch_payload(parent: str, token: bytes) -> Any:
    """In a child: authenticate to the parent's hub and fetch the launch payload."""
    from .._core._clients import get_client
    from ..transport.remote import unpack_exception

    client = get_client(parent)
    status, frames = client.request(SERVICE, b"fetch",
                                    [token, *dumps((os.getpid(), socket.gethostname()))])
    if status != b"ok":
        raise unpack_exception(loads(frames))
    return loads(frames)


def report_exit(parent: str, token: bytes, exitcode: int) -> None:
    from .._core._clients import get_client

    get_client(parent).request(SERVICE, b"exit", [token, str(exitcode).encode()], timeout=10)
