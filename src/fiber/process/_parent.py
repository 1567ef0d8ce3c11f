"""The parent as seen from a child: ``parent_process()``.

In a job, :func:`set_parent` records the parent (from the launch payload); the job's
lifeline (see :mod:`fiber.process._bootstrap`) calls :func:`parent_gone` when its
connection to the parent drops, before it ends the job.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

from ..errors import ProcessError
from ._process import Process

__all__ = ["ParentProcess", "parent_process", "set_parent", "parent_gone"]


class ParentProcess(Process):
    """The parent as seen from a child (``parent_process()``).

    The parent is gone, as the child sees it, when the child's lifeline to it drops (see
    :mod:`fiber.process._bootstrap`), which calls :func:`parent_gone` before it ends the child.
    ``sentinel`` is the read end of a pipe, made on first use, whose write end is closed
    then: it becomes readable (EOF) when ``is_alive()`` turns False, and works with
    ``multiprocessing.connection.wait`` and ``select`` as the parent's sentinel does in
    multiprocessing.
    """

    def __init__(self, name: str, pid: int) -> None:
        self._identity = ()
        self._name = name
        self._parent_pid = None  # type: ignore[assignment]
        self._job = None
        self._closed = False
        self._config = {}
        self._remote_pid = pid
        self._gone = False
        self._gone_lock = threading.Lock()  # guards the pipe and _gone against the lifeline
        self._gone_r = -1
        self._gone_w = -1

    @property
    def ident(self) -> Optional[int]:  # type: ignore[override]
        return self._remote_pid

    pid = ident  # type: ignore[assignment]

    def is_alive(self) -> bool:
        self._check_closed()
        return not self._gone

    def join(self, timeout: Optional[float] = None) -> None:
        raise ProcessError("cannot join the parent process")

    @property
    def sentinel(self) -> int:  # type: ignore[override]
        """A file descriptor that becomes readable (EOF) when the parent is gone."""
        self._check_closed()
        with self._gone_lock:
            if self._gone_r < 0:
                self._gone_r, self._gone_w = os.pipe()
                if self._gone:
                    self._close_write_end()
            return self._gone_r

    def close(self) -> None:
        with self._gone_lock:
            self._close_write_end()
            fd, self._gone_r = self._gone_r, -1
            if fd >= 0:
                os.close(fd)
            self._closed = True

    def _set_gone(self) -> bool:
        """The lifeline dropped; True if the sentinel was handed out (someone may wait)."""
        with self._gone_lock:
            self._gone = True  # before the sentinel turns readable: is_alive() agrees
            self._close_write_end()
            return self._gone_r >= 0

    def _close_write_end(self) -> None:
        fd, self._gone_w = self._gone_w, -1
        if fd >= 0:
            os.close(fd)


_parent_process: Optional[Process] = None


def parent_process() -> Optional[Process]:
    """The Process object of the parent, or None in the main process."""
    return _parent_process


def set_parent(name: str, pid: int) -> None:
    global _parent_process
    _parent_process = ParentProcess(name, pid)


def parent_gone() -> bool:
    """Called by the lifeline when the parent is gone, before it ends this process: make
    ``parent_process().sentinel`` readable. True if the sentinel was handed out."""
    parent = _parent_process
    return isinstance(parent, ParentProcess) and parent._set_gone()
