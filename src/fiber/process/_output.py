"""A job's stdout and stderr on their way to its parent: the job's side. Its fds 1 and 2
are pipes whose read ends belong to a process that outlives it, so that nothing it wrote
is lost however it ends. The design: docs/contributing/processes.md,
"Output: the job's side"."""

from __future__ import annotations

import fcntl
import os
import sys
import termios
import time
from typing import Any, Callable

from .._core import _runtime
from .._process_state import here
from ..backends._job_command import JOB_LOG_ENV
from . import _relay

__all__ = ["CAPTURED", "RELAY", "split_for_relay", "start", "forwarded", "sync", "stop",
           "relayed", "parent_gone", "forked_worker"]

CAPTURED = _runtime.OUTPUT_CAPTURED
RELAY = _runtime.OUTPUT_RELAYED
#: Seconds `sync` waits at most for the pipes to be read (a parent that is busy,
#: or gone: then the job goes on, and its lines come later or are in its log).
_SYNC_S = 2.0
_SYNC_STEP_S = 0.0002


def split_for_relay(parent: str, token: bytes) -> None:
    """First thing in a job whose output goes through a relay: fork the job from its
    relay (in the relay, this never returns). Nothing if the job has another way."""
    if os.environ.get(_runtime.OUTPUT_ENV) == RELAY:
        here.jobs.relay_link = _relay.split(parent, token)
        here.jobs.output_mode = RELAY


def start() -> None:
    """In the job, once it runs: line-buffered ``sys.stdout`` where the output goes to
    the parent (a pipe would make it block-buffered)."""
    state = here.jobs
    state.output_mode = state.output_mode or os.environ.get(_runtime.OUTPUT_ENV, "")
    out: Any = sys.stdout
    if state.output_mode and out is not None and hasattr(out, "reconfigure"):
        try:
            out.reconfigure(line_buffering=True)
        except (ValueError, OSError):
            pass


def forwarded() -> bool:
    """Whether this job's output goes to its parent (once `start` ran)."""
    return bool(here.jobs.output_mode)


def _pending(ioctl: Callable[..., object] = fcntl.ioctl, fionread: int = termios.FIONREAD) -> bool:
    """Whether something this job wrote has not left it yet, or, with a relay, is not
    known to be printed by the parent (a pool worker asks before each batch of results:
    two ioctls and a byte of the relay's page, kept cheap)."""
    state = here.jobs
    out_count, err_count = state.output_out_count, state.output_err_count
    try:
        ioctl(1, fionread, out_count, True)
        ioctl(2, fionread, err_count, True)
    except OSError:
        return False
    link = state.relay_link
    return bool(out_count[0] or err_count[0] or (link is not None and link.busy()))


def sync() -> None:
    """Wait until what this job wrote so far has left it, and with a relay until the
    parent has printed it (a round trip of the relay's: see `_relay`): before a pool
    worker sends results, so that its tasks' lines come first (two ioctls when it wrote
    nothing)."""
    state = here.jobs
    if not state.output_mode or not _pending():
        return
    link = state.relay_link
    if link is not None:
        link.hurry()
    deadline = time.monotonic() + _SYNC_S
    while _pending() and time.monotonic() < deadline:
        time.sleep(_SYNC_STEP_S)


def stop() -> None:
    """At the job's end, before its exit report: flush, and let the output leave."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
    sync()


def forked_worker() -> None:
    """In a pool worker that its job forked (fiber.pool._group), whose fds 1 and 2 are
    now pipes that the job reads: `sync` waits for those pipes alone. The job waits for
    its relay before it passes the worker's results on; the worker waiting for the relay
    too would pay its round trip for its siblings' lines."""
    here.jobs.relay_link = None


def relayed() -> bool:
    """Whether this job's relay has sent output to the parent (told in the exit report,
    so that the parent waits for the rest)."""
    link = here.jobs.relay_link
    return link is not None and link.connected()


def parent_gone() -> None:
    """The parent is gone (the program goes on): a captured job writes to its log file
    from now on, as nobody reads its pipes (a relay finds out by itself)."""
    path = os.environ.get(JOB_LOG_ENV)
    if here.jobs.output_mode != CAPTURED or not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
