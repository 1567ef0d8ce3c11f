"""The open-file limit of a master of many jobs.

A master holds a few descriptors for every job it started: its connection and its
sentinel pipe (3, ``Backend.files_per_job``), and for a job that is its own child a
pidfd and output pipes too (`FILES_PER_JOB`, the ``local`` backend's 9): a local pool of
1,024 workers needs some 9,000 while it starts, a Slurm pool of 5,000 some 15,000, where many
systems give a process 1,024 (the soft limit) and allow more (the hard limit). Before it
starts jobs, a process raises its soft limit to the hard one, once, and checks that the
jobs fit: a pool that cannot be served fails at once with the limit named, instead of
with ``EMFILE`` from deep in the transport halfway through its start.
"""

from __future__ import annotations

import os
import resource

from .._process_state import here
from ..errors import ResourceLimitError

__all__ = ["FILES_PER_JOB", "raise_open_files", "ensure_open_files"]

#: Descriptors a started job costs its parent: its one connection (the anchor, which a
#: pool worker uses for its tasks too), the two ends of its sentinel pipe, the pidfd of
#: a job started as a subprocess, and the read ends of a local job's stdout and stderr
#: pipes (see fiber.process._captured); while it is submitted, a local job's end of its
#: anchor (see fiber.process._launcher.handing_anchors) and of its pipes too.
FILES_PER_JOB = 9
#: Kept free for everything else a program opens (files, libraries, its own sockets).
SPARE_FILES = 64


def _ceiling(hard: int) -> int:
    """The highest soft limit the kernel accepts: the hard limit, or ``nr_open``."""
    if hard != resource.RLIM_INFINITY:
        return hard
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


def raise_open_files() -> int:
    """Raise this process's soft open-file limit to its hard limit (once); returns the
    soft limit now in force. Children inherit it."""
    state = here.jobs
    with state.open_files_lock:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if not state.open_files_raised:
            state.open_files_raised = True
            target = _ceiling(hard)
            if soft != resource.RLIM_INFINITY and soft < target:
                try:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                    soft = target
                except (OSError, ValueError):
                    pass
        return soft


def _open_now() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def ensure_open_files(jobs: int, what: str = "", per_job: int = FILES_PER_JOB) -> None:
    """Check that ``jobs`` more jobs, of ``per_job`` descriptors each (their backend's
    ``files_per_job``), fit under the open-file limit (raised first); ``what`` names
    them in the error (default: "starting N more jobs").

    Raises:
        ResourceLimitError: they do not; the message names the limit and how to raise it.
    """
    soft = raise_open_files()
    if soft == resource.RLIM_INFINITY:
        return
    needed = _open_now() + jobs * per_job + SPARE_FILES
    if needed > soft:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        hard_text = "unlimited" if hard == resource.RLIM_INFINITY else str(hard)
        raise ResourceLimitError(
            f"{what or f'starting {jobs} more jobs'} needs about {needed} open files (about "
            f"{per_job} a job), above this process's limit of {soft} (RLIMIT_NOFILE; "
            f"hard limit {hard_text}, already raised to it): raise the hard limit "
            "(ulimit -Hn, or LimitNOFILE in a systemd unit, nofile in "
            "/etc/security/limits.conf) or start fewer jobs")
