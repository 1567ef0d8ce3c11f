"""One ssh client in the master: a job's session, or a probe of a host. Nothing of the
launch is on a command line or in the ssh client's environment: it goes on the session's
stdin. The design: docs/contributing/processes.md, "The ssh session"."""

from __future__ import annotations

import array
import fcntl
import json
import os
import shlex
import signal
import subprocess
import termios
import time
from typing import Dict, List, Optional, Sequence

from ..._process_state import here
from .._base import JobState, JobStatus
from .._common import signal_name
from ._settings import SshSettings

__all__ = ["Session", "Probe", "ssh_base", "remote_command", "launch_data", "JOB_STUB",
           "SSH_FAILED"]

#: ssh's own exit code when it fails (cannot connect, connection lost).
SSH_FAILED = 255

#: The remote command's program: read N bytes of Python from stdin and run them. One line,
#: no ``!`` nor ``'``: any login shell takes it quoted.
LOADER = ('import os,sys;n=int(sys.argv[1]);b=b"";'
          'exec("while len(b)<n:b+=os.read(0,n-len(b)) or sys.exit(70)");exec(b)')
#: The job's first lines: its ``FIBER_*`` values from the pipe the keeper names last on its
#: command line, then fiber's bootstrap (what ``python -m fiber.process._bootstrap`` runs).
JOB_STUB = ("import json,os,sys\n"
            "with open(int(sys.argv.pop()),'rb') as f:os.environ.update(json.loads(f.read()))\n"
            "from fiber.process._bootstrap import main\n"
            "main()\n")
#: What a probe runs on a host: does its Python find fiber? (no import: quick)
_PROBE = ("import importlib.util,sys;"
          "sys.exit(0 if importlib.util.find_spec('fiber') else 3)")
_PROBE_NO_FIBER = 3

_PIPE_SIZE = 65536  # a pipe's capacity unless raised (Linux)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def keeper_source() -> bytes:
    """The keeper's source (`_keeper`), read once."""
    state = here.jobs
    if state.ssh_keeper_source is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_keeper.py")
        with open(path, "rb") as f:
            state.ssh_keeper_source = f.read()
    return state.ssh_keeper_source


def ssh_base(settings: SshSettings, log_path: str = "") -> List[str]:
    """The ssh client's options for every connection: the user's first (the first value
    ssh gets for an option wins), then fiber's: never prompt, no forwardings from
    ssh_config (two jobs would fight for a port), keepalive probes, ssh's own messages to
    ``log_path`` (errors only: at INFO it would also write to the job's stderr)."""
    argv = ["ssh", *settings.option_words()]
    if settings.config:
        argv += ["-F", settings.config]
    argv += ["-T", "-o", "BatchMode=yes", "-o", "ClearAllForwardings=yes",
             "-o", f"ConnectTimeout={settings.connect_timeout}",
             "-o", f"ServerAliveInterval={settings.alive_interval}",
             "-o", f"ServerAliveCountMax={settings.alive_count}", "-o", "LogLevel=ERROR"]
    if log_path:
        argv += ["-E", log_path]
    return argv


def remote_command(python: str, code: str, *args: str) -> str:
    """``exec PYTHON -c CODE ARGS...`` as the host's login shell reads it."""
    return " ".join(["exec", shlex.quote(python), "-c", shlex.quote(code),
                     *(shlex.quote(a) for a in args)])


def launch_data(argv: Sequence[str], env: Dict[str, str], pipe: bool = True) -> bytes:
    """What a session's stdin gets first: the keeper, then the job's launch line. With
    ``pipe`` (fiber's bootstrap: `JOB_STUB`), the job gets ``env`` in a pipe; else (any
    other command) in its environment."""
    source = keeper_source()
    line = json.dumps({"argv": list(argv), "env": env, "pipe": pipe}, separators=(",", ":"))
    return source + line.encode() + b"\n"


def _last_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    lines = [ln.strip() for ln in lines if ln.strip()]
    return lines[-1] if lines else ""


class Session:
    """A job's ssh client: started, watched, asked to end (see the module)."""

    def __init__(self, host: str, argv: List[str], data: bytes, log_path: str,
                 stdout: Optional[int], stderr: Optional[int]) -> None:
        self.host = host
        self.log_path = log_path
        self.opened = False  # the client has read its stdin: the session is open
        self.signalled = 0  # the signal this process sent the client itself, if any
        self.kill_at: Optional[float] = None  # when to kill the client (KILL unanswered)
        stdin_r, self._stdin = os.pipe()
        try:
            # its own session: a Ctrl-C at the master's terminal is the master's to handle
            self.proc = subprocess.Popen(argv, stdin=stdin_r, stdout=stdout, stderr=stderr,
                                         close_fds=True, start_new_session=True)
        except BaseException:
            os.close(self._stdin)
            raise
        finally:
            os.close(stdin_r)
        os.set_blocking(self._stdin, False)
        # a few KiB (more with large ssh_env values): the pipe holds them until ssh reads
        if len(data) > _PIPE_SIZE:
            try:
                fcntl.fcntl(self._stdin, _F_SETPIPE_SZ, len(data))
            except OSError:
                pass  # the write below says it did not fit
        if not self._write(data):
            self.proc.kill()
            self.proc.wait()
            self.close()
            raise OSError(f"the job's launch data ({len(data)} bytes) does not fit a pipe: "
                          "are ssh_env's variables that large?")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _write(self, data: bytes) -> bool:
        try:
            return os.write(self._stdin, data) == len(data)
        except OSError:  # full (the host stopped answering) or closed
            return False

    def poll_open(self) -> bool:
        """Whether the session is open: ssh reads its stdin once it has authenticated
        and opened the session channel, and not before."""
        if not self.opened and self._stdin >= 0:
            count = array.array("i", [0])
            try:
                fcntl.ioctl(self._stdin, termios.FIONREAD, count, True)
            except OSError:
                return False
            self.opened = count[0] == 0
        return self.opened

    def ask(self, force: bool, grace: float) -> None:
        """End the job: ``TERM`` or ``KILL`` to its keeper, or to the client itself while
        the session is not open (the job has not started); with ``force``, the client is
        killed ``grace`` seconds later if it is still there."""
        if self.proc.poll() is not None:
            return
        if not self.poll_open() or not self._write(b"KILL\n" if force else b"TERM\n"):
            self.kill(signal.SIGKILL if force else signal.SIGTERM)
        elif force:
            self.kill_at = time.monotonic() + grace

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.signalled = sig
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        """Drop the stdin pipe (the keeper then hears no more), whether or not it ended."""
        if self._stdin >= 0:
            os.close(self._stdin)
            self._stdin = -1

    def status(self, code: int) -> JobStatus:
        """The job's status from the client's exit code ``code``."""
        if code == 0:
            return JobStatus(JobState.SUCCEEDED, 0)
        if self.signalled and (code < 0 or code == SSH_FAILED):  # we ended the client
            return JobStatus(JobState.FAILED, -self.signalled,
                             f"killed by {signal_name(self.signalled)}")
        if code < 0:  # someone else killed the client (ssh says 255 for SIGTERM)
            return JobStatus(JobState.LOST, None,
                             f"its ssh client was killed by {signal_name(-code)}")
        if code == SSH_FAILED:
            said = _last_line(self.log_path)
            return JobStatus(JobState.LOST, None, f"the ssh connection to {self.host} was "
                             "lost" + (f": {said}" if said else ""))
        if 128 < code <= 128 + 64:  # the keeper: the job died of a signal
            return JobStatus(JobState.FAILED, -(code - 128), f"killed by {signal_name(code - 128)}")
        return JobStatus(JobState.FAILED, code, f"exit code {code}")

    def failure(self) -> str:
        """Why the connection failed before the session opened."""
        said = _last_line(self.log_path)
        return said or f"ssh exited with code {self.proc.returncode}"


class Probe:
    """``ssh HOST`` running its Python on a check that fiber is installed: whether the
    host can take jobs."""

    def __init__(self, host: str, argv: List[str], python: str, log_path: str) -> None:
        self.host = host
        self.python = python
        self.log_path = log_path
        self.proc = subprocess.Popen([*argv, "--", host, remote_command(python, _PROBE)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, close_fds=True,
                                     start_new_session=True)

    def result(self, timeout: Optional[float] = None) -> Optional[str]:
        """None while it runs; then ``""`` (the host can take jobs) or why not."""
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        code = self.proc.returncode
        if code == 0:
            return ""
        said = _last_line(self.log_path)
        err_text = err.decode("utf-8", "replace").strip().splitlines()
        if code == _PROBE_NO_FIBER:
            return f"{self.python} on {self.host} cannot import fiber (install it there)"
        if code == SSH_FAILED:
            return said or (err_text[-1] if err_text else "ssh exited with code 255")
        return (f"{self.python} cannot run on {self.host} (exit code {code}"
                + (f": {err_text[-1]})" if err_text else ")"))

    def kill(self) -> None:
        """End the probe, whatever it found (its log goes too)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass
