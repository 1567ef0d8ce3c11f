"""A job's output relay: the process that outlives the job to pass on what it wrote, for a
job that is not its parent's child (Slurm, Docker, Kubernetes), so that every byte reaches
the job's log and its parent however the job ends. The design:
docs/contributing/processes.md, "Output: the relay"."""

from __future__ import annotations

import ctypes
import mmap
import os
import resource
import select
import signal
import sys
from typing import TYPE_CHECKING, Any, Dict, NoReturn, Optional

from .._core._clients import plain_client
from .._process_state import here
from ._launcher import SERVICE, JobToken, LaunchOps, Output

if TYPE_CHECKING:
    import types

    from ..transport.client import Client

__all__ = ["split", "RelayLink", "FORWARDED_SIGNALS", "die_with"]

_READ = 65536
#: Seconds the relay lets output gather before it reads, unless the job asks it to
#: hurry (a pool worker about to send results): a chatty job sends ~50 messages a
#: second to its parent, not one a line.
_COALESCE_S = 0.02
#: Seconds the relay reads on after the job ended, while a subprocess of the job that
#: still holds the pipes goes on writing; then it stops.
_DRAIN_S = 0.5
_END_TIMEOUT_S = 10.0
#: Seconds the relay waits for the parent to confirm that it printed what came so far
#: (`_Relay._confirm`): as long as the job waits for it at most (`_output.sync`).
_SYNC_TIMEOUT_S = 2.0
#: Signals a cluster sends the job's first process that are meant for the job.
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                     signal.SIGUSR2)
_PR_SET_PDEATHSIG = 1


class RelayLink:
    """The job's side of its relay: a page they share (byte 0: the relay holds output
    that the parent has not confirmed it printed: it is reading it, forwarding it, or
    sent it; byte 1: it has connected to the parent) and a pipe to hurry it (read, pass
    on and have confirmed what the job wrote so far)."""

    def __init__(self, shared: mmap.mmap, hurry_fd: int) -> None:
        self.shared = shared
        self.hurry_fd = hurry_fd

    def busy(self) -> bool:
        return self.shared[0] != 0

    def connected(self) -> bool:
        """Whether the relay has a connection to the parent (output on its way)."""
        return self.shared[1] != 0

    def hurry(self) -> None:
        try:
            os.write(self.hurry_fd, b"x")
        except (BlockingIOError, OSError):
            pass  # full: the relay has been told already


def split(parent: str, token: bytes) -> RelayLink:
    """Fork the job from this process, which stays as its relay: in the job, returns its
    link to the relay; in the relay, never returns. Call before any thread starts."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    hurry_r, hurry_w = os.pipe()
    os.set_blocking(hurry_w, False)
    shared = mmap.mmap(-1, mmap.PAGESIZE)  # MAP_SHARED: both processes see it
    relay_pid = here.pid
    pid = os.fork()
    if pid == 0:
        die_with(relay_pid)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w, hurry_r):
            os.close(fd)
        return RelayLink(shared, hurry_w)
    for fd in (out_w, err_w, hurry_w):
        os.close(fd)
    for fd in (out_r, err_r, hurry_r):
        os.set_blocking(fd, False)
    _Relay(pid, {out_r: 1, err_r: 2}, hurry_r, shared, parent, token).run()


def die_with(parent_pid: int) -> None:
    """The calling process, forked from ``parent_pid``, ends (SIGKILL) if that process
    does: a job forked from its relay, a pool worker from its job (a cluster that kills
    the first process only). Call in the child, at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os._exit(1)


class _Relay:
    def __init__(self, child: int, pipes: Dict[int, int], hurry_fd: int, shared: mmap.mmap,
                 parent: str, token: bytes) -> None:
        self._child = child
        self._pipes = pipes  # read end -> the fd it stands for (1 or 2)
        self._hurry = hurry_fd
        self._shared = shared
        self._parent: Optional[str] = parent  # None once forwarding has ended
        self._token = token
        self._client: Any = None
        #: Output was sent that the parent has not confirmed it printed (`_confirm`).
        self._unconfirmed = False
        self._status: Optional[int] = None  # the job's wait status, once it ended
        self._sig_r, sig_w = os.pipe()
        os.set_blocking(self._sig_r, False)
        os.set_blocking(sig_w, False)
        signal.set_wakeup_fd(sig_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll (the wakeup fd)
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self._forward_signal)

    def _forward_signal(self, signum: int, frame: Optional[types.FrameType]) -> None:
        try:
            os.kill(self._child, signum)
        except ProcessLookupError:
            pass

    def run(self) -> NoReturn:
        try:
            self._loop()
            self._end_output()
        finally:
            self._exit_as_the_job()

    def _loop(self) -> None:
        poller = select.poll()
        for fd in (*self._pipes, self._hurry, self._sig_r):
            poller.register(fd, select.POLLIN)
        hurry = select.poll()
        hurry.register(self._hurry, select.POLLIN)
        open_fds = set(self._pipes)
        while open_fds:
            timeout = None if self._status is None else _DRAIN_S * 1000
            events = dict(poller.poll(timeout))
            if not events:
                return  # the job ended and nothing came for a while: a subprocess holds
                # the pipes; what it writes later goes nowhere
            if self._sig_r in events:
                _drain(self._sig_r)
                self._reap()
            hurried = self._hurry in events
            if hurried:
                _drain(self._hurry)
            elif self._status is None and open_fds & events.keys():
                hurry.poll(_COALESCE_S * 1000)  # more lines, in one read
                hurried = _drain_if_ready(hurry, self._hurry)
            self._shared[0] = 1
            for fd in list(open_fds):
                if not self._read(fd):
                    poller.unregister(fd)
                    open_fds.discard(fd)
            if hurried:
                self._confirm()
            if not self._unconfirmed:
                self._shared[0] = 0
        self._reap(block=True)

    def _reap(self, block: bool = False) -> None:
        if self._status is not None:
            return
        try:
            pid, status = os.waitpid(self._child, 0 if block else os.WNOHANG)
        except ChildProcessError:
            pid, status = self._child, 1 << 8
        if pid == self._child:
            self._status = status

    def _read(self, fd: int) -> bool:
        """Pass on what pipe ``fd`` holds; False at its end."""
        while True:
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            target = self._pipes[fd]
            _write_all(target, data)
            self._forward(target, data)
            if len(data) < _READ:
                return True

    def _forward(self, target: int, data: bytes) -> None:
        client = self._client or self._connect()
        if client is None:
            return
        try:
            client.send(SERVICE, LaunchOps.OUTPUT, Output(self._token, target, data).frames())
        except Exception:
            self._client = None  # the parent is gone: the log has everything
            client.close()
            return
        self._unconfirmed = True

    def _confirm(self) -> None:
        """Wait until the parent has printed what was sent (the job is about to send
        results, on a connection of its own). Sent is not enough: the parent reads this
        connection and the job's as they come, and could take the results first. The
        parent handles this connection's messages in order and prints each output
        message as it handles it, so its reply to ``output_sync`` comes after the lines.
        """
        unconfirmed, self._unconfirmed = self._unconfirmed, False
        client = self._client
        if client is None or not unconfirmed:
            return  # nothing sent since the last reply: no round trip
        try:
            client.request(SERVICE, LaunchOps.OUTPUT_SYNC, JobToken(self._token).frames(),
                           timeout=_SYNC_TIMEOUT_S)
        except TimeoutError:
            pass  # the parent is busy: the lines come late, not never
        except Exception:
            self._client = None  # the parent is gone: the log has everything
            client.close()

    def _connect(self) -> Optional[Client]:
        """The connection to the parent, made at the job's first output (most pool
        workers never print: a connection each is start-up time for a thousand)."""
        parent, self._parent = self._parent, None
        if parent is None:
            return None
        try:
            client = plain_client(parent)
            client.send(SERVICE, LaunchOps.OUTPUT_START, JobToken(self._token).frames())
        except Exception as e:  # the job runs on; its output stays in its log
            _write_all(2, f"fiber: cannot forward this job's output to its parent: "
                          f"{e}\n".encode())
            return None
        self._client = client
        self._shared[1] = 1
        return client

    def _end_output(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return  # it wrote nothing: the parent has nothing open
        try:
            client.request(SERVICE, LaunchOps.OUTPUT_END, JobToken(self._token).frames(),
                           timeout=_END_TIMEOUT_S)
        except Exception:
            pass  # the parent is gone or busy: what it missed is in the job's log
        client.close()

    def _exit_as_the_job(self) -> NoReturn:
        """End with the job's exit code, or by the signal that killed it (a container's
        first process cannot be killed from inside: 128 + the signal, as a shell says)."""
        self._reap(block=True)
        status = 1 << 8 if self._status is None else self._status
        sys.stdout.flush()
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            for step in (lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)),
                         lambda: signal.signal(sig, signal.SIG_DFL),
                         lambda: signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig]),
                         lambda: os.kill(here.pid, sig)):
                try:  # each on its own: SIGKILL has no handler nor mask to reset
                    step()
                except (OSError, ValueError):
                    pass
            os._exit(128 + sig)
        os._exit(os.WEXITSTATUS(status))


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except (BlockingIOError, OSError):
        pass


def _drain_if_ready(poller: select.poll, fd: int) -> bool:
    """Drain ``fd`` if ``poller`` finds it readable; whether it did."""
    if poller.poll(0):
        _drain(fd)
        return True
    return False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view):]
    except OSError:
        pass  # a log that cannot be written must not stop the forwarding
