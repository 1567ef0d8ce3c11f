"""The parent's side of a child job's output: the pipes of its stdout and stderr, read by
the hub in its own loop, so that nothing runs in the job for its output. The design:
docs/contributing/processes.md, "Output: a child's pipes"."""

from __future__ import annotations

import os
from typing import Dict, Optional

from ..backends import JobOutput
from ..transport.server import Server
from ._printer import OutputPrinter

__all__ = ["CapturedOutput"]

_READ = 65536
#: Reads of one pipe per wake-up at most: a job that floods its stdout must not keep
#: the hub from its messages.
_READS_PER_WAKE = 16


class CapturedOutput:
    """Reads one job's pipes on the hub and passes what comes to the printer and the log."""

    def __init__(self, hub: Server, printer: OutputPrinter, token: bytes,
                 output: JobOutput) -> None:
        self._hub = hub
        self._printer = printer
        self._token = token
        self._fds: Dict[int, int] = {output.stdout_fd: 1, output.stderr_fd: 2}
        self._log_path = output.log_path
        self._log_fd: Optional[int] = None
        for fd in self._fds:
            os.set_blocking(fd, False)
            hub.watch(fd, lambda fd=fd: self.read(fd))  # type: ignore[misc]

    def read(self, fd: int) -> None:
        """Pass on what pipe ``fd`` holds (on the hub, under its lock)."""
        target = self._fds.get(fd)
        if target is None:
            return
        for _ in range(_READS_PER_WAKE):
            try:
                data = os.read(fd, _READ)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._end(fd)
                return
            self._log(data)
            self._printer.write(self._token, target, data)
            if len(data) < _READ:
                return

    def _end(self, fd: int) -> None:
        """Pipe ``fd`` is at its end: every writer (the job, its subprocesses) is gone."""
        self._hub.unwatch(fd)
        os.close(fd)
        del self._fds[fd]
        if self._fds:
            return
        self._printer.close(self._token)
        if self._log_fd is not None:
            os.close(self._log_fd)
            self._log_fd = None

    def _log(self, data: bytes) -> None:
        if self._log_fd is None:
            if self._log_path is None:
                return
            try:
                self._log_fd = os.open(self._log_path,
                                       os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                                       0o600)
            except OSError:
                self._log_path = None  # a log that cannot be written: the terminal has it
                return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._log_fd, view):]
        except OSError:
            pass
