"""Launching a job-backed process: the parent's side and the child's bootstrap. The child
fetches its pickled process from its parent's hub on its anchor connection, which is also
its lifeline to the parent. The protocol, drawn: docs/contributing/processes.md, "Launch".
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import os
import secrets
import socket
import sys
import threading
from typing import Any, Callable, Dict, FrozenSet, Iterator, List, NamedTuple, Optional, Sequence

from .._core import _inspect, _runtime
from .._process_state import here
from ..backends import Backend, JobOutput, JobSpec, Resources
from ..backends._job_command import JOB_HOST_ENV, bootstrap_command
from ..config import Config, get_config
from ..errors import ProcessError
from ..transport import auth, credentials
from ..transport.operations import handles, reply_of
from ..transport.serialization import Frame, dumps, loads
from ..transport.server import Peer, Server, Service
from ..transport.sockets import split_address
from ._captured import CapturedOutput
from ._printer import OutputPrinter

__all__ = ["LaunchService", "launcher", "Launch", "handing_anchors", "check_reachable",
           "job_spec", "Fetch", "ExitReport", "JobToken", "Output", "Source", "SourceText"]

SERVICE = b"proc"
_SOURCE_TIMEOUT_S = 5.0


class LaunchOps:
    """The launch protocol's operations (a child's requests to its parent's hub)."""

    FETCH = b"fetch"
    EXIT = b"exit"
    OUTPUT_START = b"output_start"  # one-way: this connection carries the job's output
    OUTPUT = b"output"  # one-way: [token, fd, bytes], the most frequent
    OUTPUT_END = b"output_end"  # all the job's output has been sent
    OUTPUT_SYNC = b"output_sync"  # [token]: replied once what came before it is printed
    SOURCE = b"source"  # [filename]: the lines of a file the job lacks, for a traceback


class Fetch(NamedTuple):
    """``fetch``: a child started, with its launch token, its pid and the host it runs on
    (the two pickled together)."""

    token: bytes
    pid: int
    host: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Fetch:
        pid, host = loads(payload[1:])
        return cls(bytes(payload[0]), pid, host)

    def frames(self) -> List[Frame]:
        return [self.token, *dumps((self.pid, self.host))]


class ExitReport(NamedTuple):
    """``exit``: a child's exit code, and whether its relay has output on its way to the
    parent (see _relay)."""

    token: bytes
    code: int
    relayed: bool

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> ExitReport:
        return cls(bytes(payload[0]), int(bytes(payload[1])),
                   len(payload) > 2 and bytes(payload[2]) == b"1")

    def frames(self) -> List[Frame]:
        return [self.token, str(self.code).encode(), b"1" if self.relayed else b"0"]


class JobToken(NamedTuple):
    """``output_start``, ``output_sync``, ``output_end``: the job's launch token."""

    token: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> JobToken:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.token]


class Output(NamedTuple):
    """``output``: what a job wrote to its descriptor ``fd`` (1, 2), as it read it."""

    token: bytes
    fd: int
    data: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Output:
        return cls(bytes(payload[0]), int(bytes(payload[1])), bytes(payload[2]))

    def frames(self) -> List[Frame]:
        return [self.token, b"%d" % self.fd, self.data]


class Source(NamedTuple):
    """``source``: the file whose lines a job lacks, for a traceback."""

    filename: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Source:
        return cls(bytes(payload[0]).decode(errors="replace"))

    def frames(self) -> List[Frame]:
        return [self.filename.encode()]


class SourceText(NamedTuple):
    """The ``ok`` answer to a `Source`: the file's lines as the parent's `linecache` has
    them (UTF-8; empty: it has none)."""

    text: str

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> SourceText:
        return cls(bytes(payload[0]).decode("utf-8", "replace") if payload else "")

    def frames(self) -> List[Frame]:
        return [self.text.encode("utf-8", "replace")]


class Launch:
    """The parent's record of one child; callbacks run on the hub thread."""

    def __init__(self, payload: List[Frame], on_started: Callable[[int, str], None],
                 on_exit_report: Callable[[int], None], on_gone: Callable[[bool], None],
                 name: str = "", tagged: bool = False) -> None:
        self.payload = payload
        self.name = name
        self.tagged = tagged  # its lines may name their writer (see _printer)
        self.host = ""
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
        #: Children's forwarded output (see fiber.process._output), and the connection
        #: that carries each child's (peer id -> job token).
        self.printer = OutputPrinter()
        self._outputs: Dict[int, bytes] = {}
        # the dashboard shows the jobs' last output (see fiber._core._inspect)
        _inspect.add_source("output", self, lambda service: service.printer.recent())

    def add(self, token: bytes, launch: Launch) -> None:
        with self._lock:
            self._launches[token] = launch

    def name_of(self, token: bytes) -> str:
        """The name of the process whose job has ``token`` ("" if none runs)."""
        launch = self._launches.get(token)
        return launch.name if launch is not None else ""

    def remove(self, token: bytes) -> None:
        """The job has ended (or was never submitted); the hub hears it too, in case
        the end of its process's connections never comes (`Server.job_ended`)."""
        with self._lock:
            launch = self._launches.pop(token, None)
            if launch is not None and launch.process_id is not None:
                self._by_process.pop(launch.process_id, None)
                hub = _runtime.hub_if_started()
                if hub is not None:
                    hub.job_ended(launch.process_id)
        self.printer.job_ended(token)

    def _launch(self, server: Server, peer: Peer, req_id: bytes,
                token: bytes) -> Optional[Launch]:
        """The launch a request's ``token`` names; None (and the error replied, for a
        request) if none: a one-way message of a job that has ended is dropped."""
        with self._lock:
            launch = self._launches.get(token)
        if launch is None and req_id:
            server.reply_error(peer, req_id, LookupError("unknown or finished job"))
        return launch

    @handles(LaunchOps.FETCH, Fetch)
    def fetch(self, server: Server, peer: Peer, req_id: bytes, msg: Fetch) -> None:
        """A child started; answered with its payload."""
        launch = self._launch(server, peer, req_id, msg.token)
        if launch is None:
            return
        if launch.process_id is not None:  # a second copy of one job (a requeue)
            server.reply_error(peer, req_id, PermissionError("this job was already started"))
            return
        launch.host = msg.host
        self.printer.rename(msg.token, launch.name, msg.host, get_config().output_prefix)
        launch.process_id = peer.process_id
        with self._lock:
            self._by_process[peer.process_id] = msg.token
        launch.on_started(msg.pid, msg.host)
        server.reply(peer, req_id, b"ok", launch.payload)
        launch.payload = []

    @handles(LaunchOps.EXIT, ExitReport)
    def exit_report(self, server: Server, peer: Peer, req_id: bytes, msg: ExitReport) -> None:
        """A child reports its exit code; ``relayed``: its relay has output on its way
        here (see _relay), which ``join`` waits for, even if this report overtook the
        relay's first message."""
        launch = self._launch(server, peer, req_id, msg.token)
        if launch is not None:
            if msg.relayed:
                self._open_output(msg.token, launch)
            launch.on_exit_report(msg.code)
            server.reply(peer, req_id, b"ok")

    @handles(LaunchOps.OUTPUT_START, JobToken)
    def output_start(self, server: Server, peer: Peer, req_id: bytes, msg: JobToken) -> None:
        """This connection carries the job's output from now on."""
        launch = self._launch(server, peer, req_id, msg.token)
        if launch is not None:
            self._outputs[peer.peer_id] = msg.token
            self._open_output(msg.token, launch)

    def _open_output(self, token: bytes, launch: Launch, guess: str = "") -> None:
        """Print job ``token``'s output from now on, prefixed with the host the job said
        it runs on (`fetch`), else with ``guess``, which `fetch` corrects later. A job
        may say it before its output opens: a submit of many jobs returns after the
        first ones asked for their payloads."""
        self.printer.open(token, launch.name, launch.host or guess, get_config().output_prefix,
                          launch.tagged)

    def capture(self, token: bytes, output: JobOutput) -> None:
        """Read the pipes of job ``token``'s stdout and stderr from now on (a local job,
        this process's child: see _captured)."""
        hub = _runtime.hub()
        with hub.lock:
            launch = self._launches.get(token)
            if launch is not None:
                self._open_output(token, launch, guess=job_host())
            CapturedOutput(hub, self.printer, token, output)

    @handles(LaunchOps.OUTPUT, Output)
    def output(self, server: Server, peer: Peer, req_id: bytes, msg: Output) -> None:
        """What the job wrote, as it read it."""
        self.printer.write(msg.token, msg.fd, msg.data)

    @handles(LaunchOps.OUTPUT_SYNC)
    def output_sync(self, server: Server, peer: Peer, req_id: bytes,
                    payload: List[Frame]) -> None:
        """A `JobToken`, not read: answered at once, as the output messages that came before it on
        this connection were printed as they came (`output`): the job's relay asks
        before the job sends results, so that its lines are printed before them."""
        server.reply(peer, req_id, b"ok")

    @handles(LaunchOps.OUTPUT_END, JobToken)
    def output_end(self, server: Server, peer: Peer, req_id: bytes, msg: JobToken) -> None:
        """Answered once all of it is written here (the job may have ended for its
        backend already)."""
        self._outputs.pop(peer.peer_id, None)
        self.printer.close(msg.token)
        server.reply(peer, req_id, b"ok")

    @handles(LaunchOps.SOURCE, Source)
    def source(self, server: Server, peer: Peer, req_id: bytes, msg: Source) -> None:
        """Answered with the file's lines as this process has them."""
        _serve_source(server, peer, req_id, msg.filename)

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
        if launch is not None:  # told whether its host stopped answering
            launch.on_gone(server.went_silent(process_id))


def launcher() -> LaunchService:
    """The launch service on this process's hub."""
    return _runtime.hub().ensure(SERVICE, LaunchService)


def job_spec(cfg: Config, token: bytes, asked: Resources, name: str,
             backend: Backend, avoid_hosts: FrozenSet[str] = frozenset()) -> JobSpec:
    """The job of a process named ``name``: the bootstrap, which finds this process's hub
    and its launch ``token`` in its environment, with the resources ``asked`` (the
    config's per-job ones for what they leave as None), placed on none of
    ``avoid_hosts`` where the backend can choose."""
    default = Resources(cpu=cfg.cpu_per_job, memory_mb=cfg.memory_per_job_mb or None,
                        gpu=cfg.gpu_per_job or None)
    env = {_runtime.PARENT_ENV: _runtime.hub().address, _runtime.JOB_ENV: token.hex(),
           "FIBER_LISTEN_HOST": "", **auth.secret_env(),
           **credentials.credentials_env(cfg, not backend.jobs_share_network)}
    # what the job writes outlives it: this process drains the pipes of a job that is its
    # child, a relay process those of a job elsewhere (see _output)
    capture = cfg.forward_output and backend.jobs_are_children
    if cfg.forward_output:
        env[_runtime.OUTPUT_ENV] = (_runtime.OUTPUT_CAPTURED if capture
                                    else _runtime.OUTPUT_RELAYED)
    return JobSpec(command=bootstrap_command(cfg.python or sys.executable), env=env,
                   resources=asked.merged_over(default), image=cfg.image, name=name,
                   capture_output=capture, avoid_hosts=avoid_hosts)


@contextlib.contextmanager
def handing_anchors(backend: Backend, specs: Sequence[JobSpec]) -> Iterator[List[JobSpec]]:
    """``specs`` as they are, or for a backend that hands its jobs descriptors, each
    with its job's anchor: a socket pair, one end served by this process's hub at once
    as the anchor of a new process id, the other handed to the job with that id. The
    job then makes no connection and no handshake (a round trip and two HMACs less on
    each side, and less of the start-up's page copying in each forked job). This
    process's copies of the jobs' ends are closed on leaving: a job that never got its
    end leaves the hub's to end at once."""
    if not backend.passes_fds:
        yield list(specs)
        return
    hub = _runtime.hub()
    theirs: List[socket.socket] = []
    try:
        out = []
        for spec in specs:
            ours, their_end = socket.socketpair()
            theirs.append(their_end)
            process_id = secrets.token_bytes(16)
            hub.adopt(ours, process_id)
            out.append(dataclasses.replace(
                spec, env={**spec.env, _runtime.PROCESS_ID_ENV: process_id.hex()},
                inherit={**spec.inherit, _runtime.ANCHOR_FD_ENV: their_end.fileno()}))
        yield out
    finally:
        for end in theirs:
            end.close()


_LOOPBACK = ("127.", "::1", "localhost")


def check_reachable(backend: Backend) -> None:
    """Refuse to start a job that could not reach this process's hub.

    The hub binds once, to the address of the backend configured when it started; a
    context on another backend whose jobs run elsewhere needs ``listen_host``.
    """
    hub_host = split_address(_runtime.hub().address)[0]
    if not hub_host.startswith(_LOOPBACK):
        return
    wanted = backend.listen_host()
    if not wanted.startswith(_LOOPBACK):
        raise ProcessError(
            f"this process listens on {hub_host}, which jobs of backend {backend.name!r} "
            f"cannot reach (it suggests {wanted}); set listen_host (FIBER_LISTEN_HOST) or "
            f"make {backend.name!r} the configured backend before fiber is first used")


def _serve_source(server: Server, peer: Peer, req_id: bytes, filename: str) -> None:
    """Reply with the source of ``filename`` as this process's `linecache` has it
    (its file, a notebook's cell, or itself asked of its own parent): for the traceback
    of a job that lacks the file. On a thread of its own: reading may take a while, and
    never under the hub's lock."""

    def read() -> None:
        source = "".join(linecache.getlines(filename))
        with server.lock:
            server.reply(peer, req_id, b"ok", SourceText(source).frames())

    threading.Thread(target=read, name="fiber-source", daemon=True).start()


def fetch_source(parent: str, filename: str) -> Optional[str]:
    """In a job: the source of ``filename`` as the parent has it (None if it has none)."""
    from .._core._clients import get_client

    try:
        status, frames = get_client(parent).request(SERVICE, LaunchOps.SOURCE,
                                                    Source(filename).frames(),
                                                    timeout=_SOURCE_TIMEOUT_S)
    except Exception:
        return None
    text = reply_of(SourceText, frames).text if status == b"ok" else ""
    return text or None


def job_host() -> str:
    """The host this job reports: what its backend names it (see ``JOB_HOST_ENV``: a pod's
    node), else its host name."""
    return os.environ.get(JOB_HOST_ENV) or socket.gethostname()


def fetch_payload(parent: str, token: bytes) -> Any:
    """In a child: authenticate to the parent's hub and fetch the launch payload."""
    from .._core._clients import get_client
    from ..transport.remote import unpack_exception

    client = get_client(parent)
    status, frames = client.request(SERVICE, LaunchOps.FETCH,
                                    Fetch(token, here.pid, job_host()).frames())
    if status != b"ok":
        raise unpack_exception(loads(frames))
    return loads(frames)


def report_exit(parent: str, token: bytes, exitcode: int, relayed: bool) -> None:
    """In a child: its exit code, and whether its relay has sent output (see _relay)."""
    from .._core._clients import get_client

    get_client(parent).request(SERVICE, LaunchOps.EXIT,
                               ExitReport(token, exitcode, relayed).frames(), timeout=10)
