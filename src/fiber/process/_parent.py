"""The parent as seen from a child: ``parent_process()``.

In a job, `set_parent` records the parent (from the launch payload); the job's
lifeline to it (see `fiber.process._bootstrap`) calls `parent_gone` when its
connection to the parent drops. As in ``multiprocessing``, a job whose parent ended (was
terminated, killed, or lost with its host) goes on, and sees it: ``is_alive()`` False, the
sentinel readable, ``join()`` returned. It still ends with the program's main process
(see `fiber.process._lineage`), which then calls `parent_gone` too, first.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional

from .._process_state import here
from ._process import Process

__all__ = ["ParentProcess", "parent_process", "set_parent", "parent_gone",
           "answer_for_the_stdlib"]


class ParentProcess(Process):
    """The parent as seen from a child (``parent_process()``).

    The parent is gone, as the child sees it, when the child's lifeline to it drops (see
    `fiber.process._bootstrap`), which calls `parent_gone`.
    ``sentinel`` is the read end of a pipe, made on first use, whose write end is closed
    then: it becomes readable (EOF) when ``is_alive()`` turns False, and works with
    ``multiprocessing.connection.wait`` and ``select`` as the parent's sentinel does in
    multiprocessing; ``join(timeout)`` waits for the same moment.
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
        self._gone_event = threading.Event()  # set with _gone: join() waits on it
        self._watched = False  # a thread took the sentinel or joined: it may be waiting
        self._gone_lock = threading.Lock()  # guards the pipe and _gone against the lifeline
        self._gone_r = -1
        self._gone_w = -1

    @property
    def ident(self) -> Optional[int]:
        return self._remote_pid

    pid = ident

    def is_alive(self) -> bool:
        self._check_closed()
        return not self._gone

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait until the parent is gone, or ``timeout`` seconds pass (as multiprocessing's
        ``parent_process().join``, which waits on its sentinel)."""
        self._check_closed()
        self._watched = True
        self._gone_event.wait(timeout)

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable (EOF) when the parent is gone."""
        self._check_closed()
        with self._gone_lock:
            self._watched = True
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
        """The lifeline dropped; True if the sentinel was handed out or ``join`` called
        (someone may be waiting)."""
        with self._gone_lock:
            self._gone = True  # before the sentinel turns readable: is_alive() agrees
            self._gone_event.set()
            self._close_write_end()
            return self._watched

    def _close_write_end(self) -> None:
        fd, self._gone_w = self._gone_w, -1
        if fd >= 0:
            os.close(fd)


def parent_process() -> Optional[Process]:
    """The Process object of the parent, or None in the main process."""
    return here.jobs.parent_process


def set_parent(name: str, pid: int) -> None:
    """In a job: its parent is process ``name`` (pid ``pid`` on its host); the standard
    library's ``parent_process()`` says so too (`answer_for_the_stdlib`)."""
    here.jobs.parent_process = ParentProcess(name, pid)
    answer_for_the_stdlib()


def answer_for_the_stdlib() -> None:
    """Make ``multiprocessing.parent_process()`` (and a context's, and
    ``multiprocessing.process.parent_process()``) give this job's parent in this process,
    as it does in a spawned child: code that imports the standard library (a library, a
    test) and asks it, in a fiber job, got None. Its public names are replaced by a
    function that answers for this process only: in a child this job forks with the
    standard library (whose pid differs), the standard library's own answer stands."""
    import multiprocessing
    import multiprocessing.context
    import multiprocessing.process

    state = here.jobs
    if state.stdlib_parent_process is None:
        state.stdlib_parent_process = multiprocessing.process.parent_process
    stdlib, job = state.stdlib_parent_process, here.pid

    def parent_process() -> Any:
        """The parent of this process (fiber's in the job, else the standard library's)."""
        return here.jobs.parent_process if here.pid == job else stdlib()

    multiprocessing.process.parent_process = parent_process
    multiprocessing.parent_process = parent_process
    multiprocessing.context.BaseContext.parent_process = staticmethod(parent_process)  # type: ignore[assignment]


def parent_gone() -> bool:
    """Called by a lifeline when the parent is gone: make ``parent_process().sentinel``
    readable and ``join()`` return. True if anyone may be waiting for it."""
    parent = here.jobs.parent_process
    return isinstance(parent, ParentProcess) and parent._set_gone()  # noqa: SLF001 - this module's class
