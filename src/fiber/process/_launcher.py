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
           hub "proc" ◀──── exit(token, exitcode) ───┤ flush, exit
      backend watcher ── job finished ──▶ Process._finish(status)

The anchor connection doubles as the child's lifeline to its parent: when it drops (the
parent exited, was killed, or its host became unreachable for ``heartbeat_timeout``
seconds) the child's ``parent_process()`` turns dead. A second lifeline, to the program's
main process, ends the child when the program ends, so fiber never leaves orphan jobs on
a cluster (see :mod:`fiber.process._lineage`).
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Callable, Dict, List, Optional

from .._core import _runtime
from ..transport.operations import handles
from ..transport.serialization import dumps, loads
from ..transport.server import Peer, Server, Service

__all__ = ["LaunchService", "launcher", "Launch"]

SERVICE = b"proc"


class LaunchOps:
    """The launch protocol's operations (a child's requests to its parent's hub)."""

    FETCH = b"fetch"
    EXIT = b"exit"


class Launch:
    """The parent's record of one child; callbacks run on the hub thread."""

    def __init__(self, payload: List[Any], on_started: Callable[[int, str], None],
                 on_exit_report: Callable[[int], None], on_gone: Callable[[], None]) -> None:
        self.payload = payload
        self.on_started = on_started
        self.on_exit_report = on_exit_report
        self.on_gone = on_gone
        self.process_id: Optional[bytes] = None


class LaunchService(Service):
    """Hands children their payloads and hears their exit codes."""

    protocol = "launch"

    def __init__(self) -> None:
        self._launches: Dict[bytes, Launch] = {}
        self._by_process: Dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def add(self, token: bytes, launch: Launch) -> None:
        with self._lock:
            self._launches[token] = launch

    def remove(self, token: bytes) -> None:
        with self._lock:
            launch = self._launches.pop(token, None)
            if launch is not None and launch.process_id is not None:
                self._by_process.pop(launch.process_id, None)

    def _launch(self, server: Server, peer: Peer, req_id: bytes,
                payload: List[Any]) -> Optional[Launch]:
        """The launch a request's token names; None (and the error replied) if none."""
        with self._lock:
            launch = self._launches.get(bytes(payload[0]))
        if launch is None:
            server.reply_error(peer, req_id, LookupError("unknown or finished job"))
        return launch

    @handles(LaunchOps.FETCH)
    def fetch(self, server: Server, peer: Peer, req_id: bytes, payload: List[Any]) -> None:
        """A child started: ``[token, *dumps((pid, host))]``; answered with its payload."""
        launch = self._launch(server, peer, req_id, payload)
        if launch is None:
            return
        if launch.process_id is not None:  # a second copy of one job (a requeue)
            server.reply_error(peer, req_id, PermissionError("this job was already started"))
            return
        pid, host = loads(payload[1:])
        launch.process_id = peer.process_id
        with self._lock:
            self._by_process[peer.process_id] = bytes(payload[0])
        launch.on_started(pid, host)
        server.reply(peer, req_id, b"ok", launch.payload)
        launch.payload = []

    @handles(LaunchOps.EXIT)
    def exit_report(self, server: Server, peer: Peer, req_id: bytes,
                    payload: List[Any]) -> None:
        """A child reports its exit code: ``[token, code]``."""
        launch = self._launch(server, peer, req_id, payload)
        if launch is not None:
            launch.on_exit_report(int(bytes(payload[1])))
            server.reply(peer, req_id, b"ok")

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


def fetch_payload(parent: str, token: bytes) -> Any:
    """In a child: authenticate to the parent's hub and fetch the launch payload."""
    from .._core._clients import get_client
    from ..transport.remote import unpack_exception

    client = get_client(parent)
    status, frames = client.request(SERVICE, LaunchOps.FETCH,
                                    [token, *dumps((os.getpid(), socket.gethostname()))])
    if status != b"ok":
        raise unpack_exception(loads(frames))
    return loads(frames)


def report_exit(parent: str, token: bytes, exitcode: int) -> None:
    from .._core._clients import get_client

    get_client(parent).request(SERVICE, LaunchOps.EXIT, [token, str(exitcode).encode()], timeout=10)
