"""The local backend's fork server: a pre-imported template process that forks jobs, so
that a job does not pay for a new interpreter and for ``import fiber``. The protocol,
drawn: docs/contributing/processes.md, "The local fork server"."""

from __future__ import annotations

import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..._preload import preload_modules
from ..._process_state import here
from ...transport.sockets import readable
from .._job_command import interpreter_flags
from ._forkserver_protocol import (
    MAX_MESSAGE,
    MODULE,
    UNTOUCHED_SIGNALS,
    ForkOps,
    recv_message,
    send_message,
)

__all__ = ["ForkServer", "ForkServerError", "ForkedJob", "get_server", "server_pid",
           "supported", "MODULE"]

#: Seconds the template may take to import fiber and the preload modules.
START_TIMEOUT = 60.0
#: Seconds the template may take to answer a fork request before it counts as stuck.
FORK_TIMEOUT = 20.0
#: Seconds the template may take to report the end of a job whose process has exited.
REPORT_TIMEOUT = 1.0

_PRIVATE_ENV = ("FIBER_SECRET", "FIBER_TLS_CREDENTIALS", "FIBER_JOB", "FIBER_PARENT")
class ForkServerError(Exception):
    """The fork server cannot start this job: start it as a subprocess instead."""


def supported() -> bool:
    """Whether this platform has what the fork server needs (Linux: fork, SEQPACKET,
    SCM_RIGHTS and pidfds)."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork")
            and hasattr(os, "pidfd_open") and hasattr(socket, "SOCK_SEQPACKET"))


def _describe(code: Optional[int]) -> str:
    if code is None:
        return "ended"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


# -- the master's side ---------------------------------------------------------------------


class ForkedJob:
    """A job forked by the template: what the local backend uses of ``subprocess.Popen``.

    ``returncode`` is set by the template's exit report; ``lost_reason`` when the template
    died and the job has ended since (its exit code unknown to the backend).
    """

    def __init__(self, on_finish: Callable[[], None]) -> None:
        self.pid = 0
        self.returncode: Optional[int] = None
        self.lost_reason = ""
        self._pidfd: Optional[int] = None
        self._cond = threading.Condition()
        self._answered = False
        self.error = ""
        self._on_finish = on_finish

    @property
    def finished(self) -> bool:
        return self.returncode is not None or bool(self.lost_reason)

    def poll(self) -> Optional[int]:
        return self.returncode

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Whether the job finished within ``timeout`` seconds."""
        with self._cond:
            return self._cond.wait_for(lambda: self.finished, timeout)

    def await_report(self, timeout: float) -> None:
        """If its process has exited (its pidfd is readable) but the template's report of
        how has not come yet, wait up to ``timeout`` seconds for it: who saw the process
        gone finds it ended, as multiprocessing's ``poll`` reaps an exited child."""
        with self._cond:
            pidfd = None if self.finished else self._pidfd
            if pidfd is not None and readable([pidfd], 0):
                self._cond.wait_for(lambda: self.finished, timeout)

    def dup_pidfd(self) -> Optional[int]:
        """A duplicate of its pidfd (to watch it once its template is gone), if any."""
        with self._cond:
            return None if self._pidfd is None else os.dup(self._pidfd)

    def send_signal(self, sig: int) -> None:
        """Signal the job, unless it has ended (its pidfd makes this exact)."""
        with self._cond:
            if self.finished or not self.pid:
                return
            try:
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, sig)
                else:
                    os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    # Called by the server's reader thread.

    def started(self, pid: int, pidfd: Optional[int]) -> None:
        """The template forked it (called by the fork server's reader)."""
        with self._cond:
            self.pid, self._pidfd, self._answered = pid, pidfd, True
            self._cond.notify_all()

    def failed(self, error: str) -> None:
        """It could not be forked (called by the fork server)."""
        with self._cond:
            self.error, self._answered = error, True
            self._cond.notify_all()

    def wait_answer(self, timeout: float) -> bool:
        """Wait for `started` or `failed`; whether one came in time."""
        with self._cond:
            return self._cond.wait_for(lambda: self._answered, timeout)

    def end(self, returncode: Optional[int], lost_reason: str = "") -> None:
        """It exited (``returncode``) or was lost (called by the fork server)."""
        with self._cond:
            if self.finished:
                return
            self.returncode, self.lost_reason = returncode, lost_reason
            if self._pidfd is not None:
                os.close(self._pidfd)
                self._pidfd = None
            self._cond.notify_all()
        try:
            self._on_finish()
        except Exception:
            pass


class ForkServer:
    """The master's end of one template process.

    Raises (on creation):
        ForkServerError: the template could not start (the message says why).
    """

    def __init__(self, python: str, preload: Sequence[str],
                 timeout: Optional[float] = None) -> None:
        self.alive = False
        self.reason = ""
        self.preloaded: List[str] = []
        self.preload_failures: Dict[str, str] = {}
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: Dict[int, ForkedJob] = {}
        self._running: Dict[int, ForkedJob] = {}
        self._closing = False
        sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 2 * MAX_MESSAGE)
        except OSError:
            pass
        env = {k: v for k, v in os.environ.items() if k not in _PRIVATE_ENV}
        try:
            # Its stderr is ours (its own errors); a job gets our stdout and stderr as
            # they are when the job starts, with each fork request.
            self._proc = subprocess.Popen(
                [python, *interpreter_flags(), "-m", MODULE, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env,
                close_fds=True)
        except OSError as e:
            sock.close()
            raise ForkServerError(f"cannot start the fork server: {e}") from None
        finally:
            theirs.close()
        self._sock = sock
        self.pid = self._proc.pid
        try:
            self._handshake(preload, START_TIMEOUT if timeout is None else timeout)
        except BaseException:
            self._abort()
            raise
        self.alive = True
        here.jobs.fork_servers_live.add(self)
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"fiber-forkserver-{self.pid}")
        self._reader.start()

    def _handshake(self, preload: Sequence[str], timeout: float) -> None:
        try:
            send_message(self._sock, {"op": ForkOps.INIT, "preload": list(preload),
                               "sys_path": list(sys.path), "argv": list(sys.argv)})
            if not readable([self._sock], timeout):
                raise ForkServerError(
                    f"the fork server did not get ready within {timeout:g} s "
                    f"(preloading {', '.join(preload) or 'nothing'})")
            msg = recv_message(self._sock, 1 << 16)
        except (OSError, ValueError) as e:
            raise ForkServerError(f"the fork server failed to start: {e}") from None
        if msg is None:
            try:
                code: Optional[int] = self._proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            raise ForkServerError(f"the fork server {_describe(code)} while starting")
        obj, fds = msg
        for fd in fds:
            os.close(fd)
        if obj.get("op") != ForkOps.READY:
            raise ForkServerError(f"the fork server cannot work: {obj.get('error', obj)}")
        self.preloaded = list(obj.get("preloaded", []))
        self.preload_failures = dict(obj.get("failed", {}))

    def _abort(self) -> None:
        try:
            self._proc.kill()
        except OSError:
            pass
        self._proc.wait()
        self._sock.close()

    def fork(self, argv: Sequence[str], env: Dict[str, str], cwd: Optional[str],
             on_finish: Callable[[], None], timeout: Optional[float] = None) -> ForkedJob:
        """Fork a child that runs ``argv`` (``python -m fiber.process._bootstrap``) with ``env``.

        Raises:
            ForkServerError: the template cannot start this job (it is gone, stuck, or the
                request cannot be sent); nothing was started.
        """
        result = self.fork_many([(argv, env, on_finish, None, {})], cwd, timeout)[0]
        if isinstance(result, ForkServerError):
            raise result
        return result

    def fork_many(self, jobs: Sequence[Tuple[Sequence[str], Dict[str, str],
                                             Callable[[], None], Optional[Tuple[int, int]],
                                             Dict[str, int]]],
                  cwd: Optional[str], timeout: Optional[float] = None
                  ) -> List[Union[ForkedJob, ForkServerError]]:
        """Fork a child per ``(argv, env, on_finish, stdio, inherit)``: every request is
        sent before the first answer is awaited, so that a pool of 1,024 workers is not
        1,024 round trips to the template. A job's stdout and stderr are the two fds of
        ``stdio`` (its log file, or pipes), or with None this process's own; it is handed
        the descriptors of ``inherit`` (see ``JobSpec.inherit``). Each job is a
        `ForkedJob`, or the ForkServerError saying why the template did not start
        it."""
        own_stdio = [fd for fd in (1, 2) if _is_open(fd)]
        ignored = _ignored_signals()
        sent: List[Union[ForkedJob, ForkServerError]] = []
        for argv, env, on_finish, job_stdio, inherit in jobs:
            stdio = own_stdio if job_stdio is None else list(job_stdio)
            forked = ForkedJob(on_finish)
            with self._lock:
                if not self.alive:
                    sent.append(ForkServerError(self.reason or "the fork server is gone"))
                    continue
                job_id = next(self._ids)
                self._pending[job_id] = forked
            request = {"op": ForkOps.FORK, "id": job_id, "argv": list(argv), "env": env,
                       "cwd": cwd, "stdio": ([fd in stdio for fd in (1, 2)]
                                             if job_stdio is None else [True, True]),
                       "ignored": ignored, "inherit": list(inherit)}
            try:
                with self._send_lock:
                    send_message(self._sock, request, [*stdio, *inherit.values()])
            except (OSError, ValueError) as e:
                with self._lock:
                    self._pending.pop(job_id, None)
                sent.append(ForkServerError(f"cannot hand the job to the fork server: {e}"))
                continue
            sent.append(forked)
        # The template forks one after the other: the allowance grows with the batch.
        deadline = time.monotonic() + (FORK_TIMEOUT if timeout is None else timeout) * (
            1 + len(jobs) // 64)
        out: List[Union[ForkedJob, ForkServerError]] = []
        for job in sent:
            if isinstance(job, ForkedJob):
                if not job.wait_answer(max(0.0, deadline - time.monotonic())):
                    self._kill("did not answer a fork request in time")
                    job.wait_answer(10)  # the reader answers every pending request as it ends
                if job.error or not job.pid:
                    out.append(ForkServerError(job.error or "the fork server did not start "
                                               "the job"))
                    continue
            out.append(job)
        return out

    def close_socket(self) -> None:
        """Close this process's end of the template's socket (a fork of the master must
        not hold it: the template ends when the master's closes)."""
        try:
            self._sock.close()
        except OSError:
            pass

    def _kill(self, why: str) -> None:
        with self._lock:
            if not self.reason:
                self.reason = f"the fork server (pid {self.pid}) {why}"
        try:
            self._proc.kill()
        except OSError:
            pass

    def close(self) -> None:
        """Stop the template (it exits at EOF). Jobs it forked run on; each is reported
        LOST when it ends, as after the template's death."""
        with self._lock:
            self._closing = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader is not threading.current_thread():
            self._reader.join(10)

    # -- the reader thread -------------------------------------------------------------

    def _read_loop(self) -> None:
        error = ""
        try:
            while True:
                msg = recv_message(self._sock, 1 << 16)
                if msg is None:
                    break
                self._dispatch(*msg)
        except Exception as e:  # the link broke, or a message made no sense: as its death
            error = f"{type(e).__name__}: {e}"
        self._died(error)

    def _dispatch(self, obj: Dict[str, Any], fds: List[int]) -> None:
        handler = self._HANDLERS.get(str(obj.get("op")))
        if handler is None:  # not a message the master takes: ignored
            for fd in fds:
                os.close(fd)
            return
        getattr(self, handler)(obj, fds)

    #: The template's messages to the master, and their handlers.
    _HANDLERS: Dict[str, str] = {ForkOps.FORKED: "_on_forked", ForkOps.EXIT: "_on_exit",
                                 ForkOps.FORK_FAILED: "_on_fork_failed"}

    def _on_forked(self, obj: Dict[str, Any], fds: List[int]) -> None:
        with self._lock:
            job = self._pending.pop(int(obj["id"]), None)
            if job is not None:
                self._running[int(obj["pid"])] = job
        if job is None:
            for fd in fds:
                os.close(fd)
            return
        for fd in fds[1:]:
            os.close(fd)
        job.started(int(obj["pid"]), fds[0] if fds else None)

    def _on_exit(self, obj: Dict[str, Any], fds: List[int]) -> None:
        for fd in fds:
            os.close(fd)
        with self._lock:
            job = self._running.pop(int(obj["pid"]), None)
        if job is not None:
            job.end(int(obj["code"]))

    def _on_fork_failed(self, obj: Dict[str, Any], fds: List[int]) -> None:
        for fd in fds:
            os.close(fd)
        with self._lock:
            job = self._pending.pop(int(obj["id"]), None)
        if job is not None:
            job.failed(f"the fork server could not fork: {obj.get('error', '?')}")

    def _died(self, error: str) -> None:
        if error:  # it sent something we cannot read: it is of no further use
            self._kill(f"broke its protocol ({error})")
        try:
            code: Optional[int] = self._proc.wait(5)
        except subprocess.TimeoutExpired:  # its socket broke but it lives: end it
            self._proc.kill()
            code = self._proc.wait()
        with self._lock:
            self.alive = False
            if not self.reason:
                self.reason = f"the fork server (pid {self.pid}) {_describe(code)}"
                if error:
                    self.reason += f" ({error})"
            reason, closing = self.reason, self._closing
            pending, self._pending = list(self._pending.values()), {}
            running, self._running = list(self._running.values()), {}
        here.jobs.fork_servers_live.discard(self)
        self._sock.close()
        for job in pending:
            job.failed(reason)
        orphans: Dict[int, ForkedJob] = {}
        for job in running:
            pidfd = job.dup_pidfd()
            if pidfd is None:  # cannot be watched: end it rather than lose track of it
                job.send_signal(signal.SIGKILL)
                job.end(None, f"{reason}; the job was killed, its exit code is unknown")
            else:
                orphans[pidfd] = job
        if running and not closing:
            sys.stderr.write(f"fiber: {reason}; {len(running)} job(s) it started are "
                             "reported LOST when they end; the next job starts a new one\n")
            sys.stderr.flush()
        try:
            while orphans:
                ready = readable(list(orphans), None)
                for fd in ready:
                    job = orphans.pop(fd)
                    os.close(fd)
                    job.end(None, f"{reason} before the job ended; its exit code is unknown")
        finally:
            for fd in orphans:
                os.close(fd)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False


def _ignored_signals() -> List[int]:
    """Signals this process ignores: a subprocess would inherit that, so a forked job
    does too."""
    out = []
    for sig in signal.valid_signals():
        if isinstance(sig, signal.Signals) and sig.name in UNTOUCHED_SIGNALS:
            continue
        try:
            if signal.getsignal(sig) == signal.SIG_IGN:
                out.append(int(sig))
        except (OSError, ValueError):
            pass
    return out


def get_server(python: str, preload_setting: str) -> ForkServer:
    """This process's fork server, started on first use (again after it died).

    Raises:
        ForkServerError: it cannot start; this process then starts no other.
    """
    state = here.jobs
    server = state.fork_server
    if server is not None and server.alive:
        return server
    with state.fork_server_lock:
        if state.fork_server_failed is not None:
            raise ForkServerError(state.fork_server_failed)
        if state.fork_server is None or not state.fork_server.alive:
            try:
                state.fork_server = ForkServer(python, preload_modules(preload_setting))
            except ForkServerError as e:
                state.fork_server_failed = str(e)
                raise
        return state.fork_server


def server_pid() -> Optional[int]:
    """The pid of this process's live template, if any (tests, diagnostics)."""
    server = here.jobs.fork_server
    return server.pid if server is not None and server.alive else None


def _after_fork_in_child() -> None:
    # A fork of the master (user code calling os.fork) must not hold the template's
    # socket: the template ends when the master's copy closes, and only then.
    state = here.jobs
    for server in list(state.fork_servers_live):
        server.close_socket()
    state.fork_servers_live.clear()
    state.fork_server = None


here.after_fork_in_child(_after_fork_in_child)
