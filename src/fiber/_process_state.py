"""This process's state: its id, fiber's per-process state, and how it is made anew.

``here.transport``, ``here.jobs`` and ``here.api`` hold what each layer keeps per process
(declared in `fiber._state`). A module whose state needs renewing in a forked child (its
hub, its connections, a lock its threads share) registers how
(`ProcessState.after_fork_in_child`), and how a test puts it back
(`ProcessState.for_tests`): one registry, as CPython's ``multiprocessing.util`` keeps
one. ``here.pid`` is this process's id, kept current across forks: a record made by one
process (a lease, a manager, a ``Process``) compares its owner's id with it, rather than
asking the kernel at each use. Design: ``docs/contributing/processes.md``.

Imports nothing of fiber's but `fiber._state` (which imports nothing): every layer may
use it.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Callable, List

from ._state.api import ApiState
from ._state.jobs import JobsState
from ._state.transport import TransportState

__all__ = ["ProcessState", "here"]

Hook = Callable[[], None]


class ProcessState:
    """This process's id and the hooks that renew its state (one instance: `here`)."""

    __slots__ = ("pid", "forks", "transport", "jobs", "api", "_after_fork", "_for_tests")

    def __init__(self) -> None:
        #: This process's id: set at import and in a forked child before its hooks run.
        self.pid = os.getpid()
        #: How many forks this process's state has been renewed by, since its start
        #: (0 in a process that was not forked from a fiber process).
        self.forks = 0
        #: Each layer's state (`fiber._state`).
        self.transport = TransportState()
        self.jobs = JobsState()
        self.api = ApiState()
        self._after_fork: List[Hook] = []
        self._for_tests: List[Hook] = []

    def after_fork_in_child(self, hook: Hook) -> Hook:
        """Call ``hook()`` in each child forked from now on (``os.fork``, a
        ``multiprocessing`` fork, the local backend's fork server), after ``pid`` is the
        child's, in the order the hooks were registered. What a hook raises is printed
        and the next hook runs, as for ``os.register_at_fork``. Returns ``hook`` (a
        decorator)."""
        self._after_fork.append(hook)
        return hook

    def for_tests(self, hook: Hook) -> Hook:
        """Call ``hook()`` in `reset_for_tests`: it puts its module's state back as a
        fresh process has it (caches, counters, remembered warnings). Returns ``hook``."""
        self._for_tests.append(hook)
        return hook

    def forked(self) -> None:
        """(``os.register_at_fork``'s, in a child.) This process is new: its id, then
        its hooks."""
        self.pid = os.getpid()
        self.forks += 1
        _run(self._after_fork)

    def reset_for_tests(self) -> None:
        """Put every registered piece of state back as a fresh process has it."""
        _run(self._for_tests)


def _run(hooks: List[Hook]) -> None:
    for hook in list(hooks):
        try:
            hook()
        except Exception:  # one failing must not keep the others from renewing theirs
            sys.stderr.write(f"fiber: {getattr(hook, '__qualname__', hook)!s} failed:\n")
            traceback.print_exc()


here = ProcessState()
os.register_at_fork(after_in_child=here.forked)
