"""How a batch job's end reads, whichever engine ran it (Slurm, Grid Engine): exit codes
in ``multiprocessing``'s convention (minus the signal that ended the job), the words of a
reason, a job cancelled by fiber or by someone else. Each engine maps its own states and
fields onto these; pure functions, tested without a cluster."""

from __future__ import annotations

import signal
from typing import Optional

from ._base import JobState, JobStatus
from ._common import signal_name

__all__ = ["exit_words", "shell_code", "exit_status", "cause_code", "cancelled_status"]


def exit_words(code: int) -> str:
    """A non-zero exit code in words: ``killed by SIGKILL`` (``code`` -9), ``exit code 3``."""
    return f"killed by {signal_name(-code)}" if code < 0 else f"exit code {code}"


def shell_code(status: int) -> int:
    """A shell's exit status (128 + n: signal n ended the command) as an exit code: minus
    the signal, or the status itself."""
    return -(status - 128) if 128 < status <= 128 + 64 else status


def exit_status(code: int) -> JobStatus:
    """A job that ended on its own: SUCCEEDED for 0, else FAILED with its `exit_words`."""
    if code == 0:
        return JobStatus(JobState.SUCCEEDED, 0)
    return JobStatus(JobState.FAILED, code, exit_words(code))


def cause_code(code: Optional[int], killed_by: Optional[int] = None) -> int:
    """A failed job's exit code where the engine gave none (0, None): minus the signal
    ``killed_by`` of the limit that ended it (a time limit, memory), else 1."""
    return code or (-killed_by if killed_by else 1)


def cancelled_status(cancelled: Optional[str], other: str,
                     other_code: int = -signal.SIGTERM) -> JobStatus:
    """A cancelled job's status: by fiber (``cancelled`` ``"term"`` or ``"kill"``, the
    signal it sent), else by someone else (``other``: the engine's cancel command, with the
    signal it sends, ``other_code``)."""
    if cancelled:
        code = -signal.SIGKILL if cancelled == "kill" else -signal.SIGTERM
        return JobStatus(JobState.CANCELLED, code, "cancelled by fiber")
    return JobStatus(JobState.CANCELLED, other_code, other)
