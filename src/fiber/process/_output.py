"""A job's stdout and stderr, forwarded to its parent as they are written.

::

    job (this module)                                         parent's hub ("proc" service)
    ─────────────────                                         ─────────────────────────────
    fds 1, 2 ──▶ pipes ──▶ fiber-output thread ─┬─ tee ──▶ the job's own log (the fds 1, 2
                                                │          it started with: a Slurm output
                                                │          file, a container's or pod's log,
                                                │          a local job's log file)
                                                └─ [proc, output, token, fd, bytes] ──▶
                                                   printed, each line prefixed, by the
                                                   parent (fiber.process._printer)
    at the end: flush, fds 1, 2 back to the log, drain ─ [proc, output_end] ──▶ (replied)
                                                      ─ then the exit report (_launcher)

The file descriptors themselves are redirected, so that native code, ``os.write`` and
subprocesses are forwarded as well as ``print``; ``sys.stdout`` is made line-buffered, so
that a line appears when it is written, not when 8 KiB of them are. The bytes go as they
are read (the parent cuts them into lines): a chatty job sends one message per read, not
per line. One connection (this module's own client, made at the job's first output)
carries them in order; each read is sent under a lock that :func:`sync` takes too, so that
a pool worker can push what its task printed before it sends the task's result
(:func:`sync`), and a job killed right after its result has already handed its output
over. The exit report is sent only after the parent has acknowledged ``output_end``:
output is never lost because the job ended just after writing it.
"""

from __future__ import annotations

import os
import select
import sys
import threading
from typing import Any, List, Optional, Tuple

from .._core._clients import own_client
from ._launcher import SERVICE, LaunchOps

__all__ = ["OutputTap", "start", "sync", "stop", "parent_gone"]

_READ = 65536
_END_TIMEOUT_S = 10.0
#: Seconds the forwarding thread lets output gather before it reads (see _run).
_COALESCE_S = 0.02
#: Seconds the end waits for a pipe's other writers (a subprocess of the job still
#: running) before it stops reading.
_DRAIN_S = 0.5


class OutputTap:
    """The redirection of this job's fds 1 and 2, and the thread that forwards them."""

    def __init__(self, parent: str, token: bytes) -> None:
        self._token = token
        self._lock = threading.Lock()
        #: Where the output goes; None once forwarding has ended (the parent is gone).
        self._parent: Optional[str] = parent
        #: The connection that carries it, made at the first output (see _connect).
        self._client: Any = None
        #: The job's own log: what fds 1 and 2 were when it started.
        self._log = (os.dup(1), os.dup(2))
        self._pipes: List[Tuple[int, int]] = []  # (read end, the fd it replaces)
        for target in (1, 2):
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.dup2(w, target)
            os.close(w)
            self._pipes.append((r, target))
        self._pending = select.poll()
        for r, _ in self._pipes:
            self._pending.register(r, select.POLLIN)
        self._wake_r, self._wake_w = os.pipe()
        self._wake_poll = select.poll()
        self._wake_poll.register(self._wake_r, select.POLLIN)
        out: Any = sys.stdout
        if out is not None and hasattr(out, "reconfigure"):
            try:
                out.reconfigure(line_buffering=True)
            except (ValueError, OSError):
                pass
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="fiber-output", daemon=True)
        self._thread.start()

    # -- any thread ------------------------------------------------------------------------

    def sync(self) -> None:
        """Forward what has been written so far (what the thread has not read yet)."""
        if not self._pending.poll(0):  # one syscall when there is nothing (the usual)
            return
        with self._lock:
            for r, target in self._pipes:
                self._drain(r, target)

    def stop(self) -> None:
        """At the job's end: flush, give fds 1 and 2 back to the job's log, forward what
        is left, and wait until the parent has taken it in."""
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except Exception:
                pass
        with self._lock:
            self._stopping = True
            for log_fd, target in zip(self._log, (1, 2)):
                os.dup2(log_fd, target)  # closes the pipes' write ends (ours)
        os.write(self._wake_w, b"x")
        self._thread.join(_DRAIN_S + 1.0)
        with self._lock:
            for r, target in self._pipes:
                self._drain(r, target)
            client, self._client, self._parent = self._client, None, None
        if client is not None:  # else it wrote nothing: the parent has nothing open
            try:
                client.request(SERVICE, LaunchOps.OUTPUT_END, [self._token], timeout=_END_TIMEOUT_S)
            except Exception:
                pass  # the parent is gone or busy: what it missed is in the job's log
            client.close()

    def to_log_only(self) -> None:
        """The parent is gone: stop forwarding, and put what is pending in the job's log
        (the job is about to end at once)."""
        with self._lock:
            client, self._client, self._parent = self._client, None, None
            for r, target in self._pipes:
                self._drain(r, target)
        if client is not None:
            client.close()

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()
        for r, _ in self._pipes:
            poller.register(r, select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        open_fds = {r for r, _ in self._pipes}
        while open_fds:
            events = poller.poll(_DRAIN_S * 1000 if self._stopping else None)
            if not events:
                return  # stopping, and nothing more came: a writer that lingers (a
                # subprocess) keeps its pipe open; the end drains what is there
            if not self._stopping and any(fd != self._wake_r for fd, _ in events):
                # Let the lines of the next few ms come too, and read them at once: a
                # chatty job wakes this thread (and takes its GIL) ~50 times a second,
                # not once a line; a pool worker's results take them before that.
                self._wake_poll.poll(_COALESCE_S * 1000)
            for fd, _ in events:
                if fd == self._wake_r:
                    poller.unregister(fd)
                    continue
                with self._lock:
                    target = 1 if fd == self._pipes[0][0] else 2
                    if not self._drain(fd, target):
                        poller.unregister(fd)
                        open_fds.discard(fd)

    def _drain(self, r: int, target: int) -> bool:
        """Read what the pipe holds and pass it on (under the lock); False at its end."""
        while True:
            try:
                data = os.read(r, _READ)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            self._write_log(target, data)
            self._forward(target, data)
            if len(data) < _READ:
                return True

    def _write_log(self, target: int, data: bytes) -> None:
        fd = self._log[target - 1]
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass  # a log that cannot be written must not stop the forwarding

    def _forward(self, target: int, data: bytes) -> None:
        client = self._client or self._connect()
        if client is None:
            return
        try:
            client.send(SERVICE, LaunchOps.OUTPUT, [self._token, b"%d" % target, data])
        except Exception:
            self._client = None  # the parent is gone: the log still has everything
            client.close()

    def _connect(self) -> Any:
        """The connection to the parent, made when the job first writes (under the lock):
        most pool workers never print, and a connection with its handshake for each of
        a thousand workers is start-up time of the pool, for them and for the parent."""
        parent, self._parent = self._parent, None
        if parent is None:
            return None
        try:
            client = own_client(parent)
            client.send(SERVICE, LaunchOps.OUTPUT_START, [self._token])
        except Exception as e:  # the job runs on; its output stays in its own log
            self._write_log(2, f"fiber: cannot forward this job's output to its parent: "
                               f"{e}\n".encode())
            return None
        self._client = client
        return client


_tap: Optional[OutputTap] = None


def start(parent: str, token: bytes) -> None:
    """Forward this job's stdout and stderr to its parent from now on (in a job)."""
    global _tap
    try:
        _tap = OutputTap(parent, token)
    except Exception as e:  # the job runs on; its output stays in its own log
        sys.stderr.write(f"fiber: cannot forward this job's output to its parent: {e}\n")


def sync() -> None:
    """Forward what this job wrote so far, before what it sends next (a pool result)."""
    tap = _tap
    if tap is not None:
        tap.sync()


def parent_gone() -> None:
    """The parent is gone (and this job goes on, or ends now): what it wrote and writes
    goes to its log only."""
    tap = _tap
    if tap is not None:
        tap.to_log_only()


def stop() -> None:
    """Forward the rest and give the fds back (at the job's end, before its exit report)."""
    global _tap
    tap, _tap = _tap, None
    if tap is not None:
        tap.stop()
