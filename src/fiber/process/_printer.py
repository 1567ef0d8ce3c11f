"""The parent's side of forwarded output: each job's lines on this process's stdout and
stderr, prefixed with the job's name and host (``(PoolWorker-3@node2) ...``).

A job sends the bytes of its fds 1 and 2 as it reads them (see `_output`); they
come to the launch service on the hub (`_launcher`), which hands them here under
the hub's lock. Lines are put together per job and stream, and written whole, with the
prefix, to ``sys.stdout`` or ``sys.stderr`` as they are then: this process's own streams'
file descriptors (one write a line: never inside a line this process is printing), or a
notebook's or a test's capture (written and flushed): a line appears as soon as it is
complete. What a job
wrote without an end of line is written when the job's output ends. A job's output ends
with its ``output_end`` message, or when its output connection closes (a killed job):
`OutputPrinter.wait_closed` lets ``join`` wait for that, so that what a job wrote
is on the terminal when ``join`` returns.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import threading
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple

__all__ = ["OutputPrinter", "whole_lines"]

#: A line is written whole, in one write, up to this size (a long JSON record): two jobs'
#: lines never mix then. A longer one is written in pieces of this size, each cut between
#: two characters, the line going on with the next (see `whole_lines`); another writer's
#: line may then come between them, as on a terminal that several processes share.
_MAX_PARTIAL = 1 << 20
#: Chunks of output (of whole lines) kept for the dashboard, and the text kept of each.
_RECENT = 200
_RECENT_CHARS = 500


#: The tag a job of several pool workers puts before each line of a worker's
#: (``(PoolWorker-3) ``, see fiber.pool._tagged): the worker's name.
_TAG = re.compile(r"\(([^()\s@]+)\) ")


class _JobOutput:
    """One job's output: its prefix and its unfinished lines. A ``tagged`` job's lines
    may each name the process that wrote them (`_TAG`): they are prefixed with that
    name, at the job's host."""

    __slots__ = ("name", "host", "prefix", "tagged", "partial", "open", "closed", "ended")

    def __init__(self, name: str, host: str, prefix: str, tagged: bool) -> None:
        self.name = name
        self.host = host
        self.prefix = prefix
        self.tagged = tagged
        self.partial: List[bytes] = [b"", b""]  # fd 1, fd 2
        #: A long line was written in part (see `whole_lines`): its rest has no prefix.
        self.open = [False, False]
        self.closed = threading.Event()
        self.ended = False  # the job has ended (its backend said so)


class OutputPrinter:
    """Jobs' forwarded output, written to this process's stdout and stderr. Its methods
    run under the hub's lock (the launch service's), but for `wait_closed`."""

    def __init__(self) -> None:
        self._jobs: Dict[bytes, _JobOutput] = {}
        #: The last chunks written, each (when, job name, fd, text), for the dashboard.
        self._recent: Deque[Tuple[float, str, int, str]] = collections.deque(maxlen=_RECENT)

    def recent(self) -> List[Dict[str, object]]:
        """The jobs' last output, oldest first, as plain values (a chunk of whole lines
        each, cut to its last `_RECENT_CHARS` characters)."""
        return [{"time": t, "name": name, "fd": fd, "text": text}
                for t, name, fd, text in list(self._recent)]

    def open(self, token: bytes, name: str, host: str, prefixed: bool,
             tagged: bool = False) -> None:
        """Job ``token`` forwards its output from now on; its lines will carry
        ``(name@host) `` (a ``tagged`` line, its own name's: see `_JobOutput`)."""
        if token in self._jobs:  # opened already (see LaunchService.exit_report)
            return
        prefix = f"({name}@{host}) " if prefixed else ""
        self._jobs[token] = _JobOutput(name, host, prefix, tagged)

    def rename(self, token: bytes, name: str, host: str, prefixed: bool) -> None:
        """Job ``token`` said where it runs: its lines from now on carry ``(name@host) ``
        (its output was opened before, naming the host it was thought to be on: a job
        whose pipes this process reads may run on another host, reached by ssh)."""
        job = self._jobs.get(token)
        if job is not None:
            job.name, job.host = name, host
            job.prefix = f"({name}@{host}) " if prefixed else ""

    def write(self, token: bytes, fd: int, data: bytes) -> None:
        job = self._jobs.get(token)
        if job is None or fd not in (1, 2):
            return
        lines, job.partial[fd - 1] = whole_lines(job.partial[fd - 1] + data)
        if lines:
            _emit(fd, job, lines)
            self._keep(job, fd, lines)

    def _keep(self, job: _JobOutput, fd: int, chunk: bytes) -> None:
        text = chunk[-_RECENT_CHARS:].decode(errors="replace")
        self._recent.append((time.time(), job.name, fd, text))

    def close(self, token: bytes) -> None:
        """The job's output has ended: write what it left unfinished."""
        job = self._jobs.pop(token, None)
        if job is None:
            return
        for fd in (1, 2):
            rest, job.partial[fd - 1] = job.partial[fd - 1], b""
            if rest or job.open[fd - 1]:  # its last words end a line
                _emit(fd, job, rest + b"\n")
                self._keep(job, fd, rest)
        job.closed.set()

    def job_ended(self, token: bytes) -> None:
        """The job has ended: its output, if still open, is about to end too."""
        job = self._jobs.get(token)
        if job is not None:
            job.ended = True

    def wait_ended(self, timeout: float) -> bool:
        """Wait until the output of every job that has ended has been written (any
        thread; a pool's ``join``). False if some is still open after ``timeout``."""
        deadline = time.monotonic() + timeout
        for job in [j for j in list(self._jobs.values()) if j.ended]:
            if not job.closed.wait(max(0.0, deadline - time.monotonic())):
                return False
        return True

    def wait_closed(self, token: bytes, timeout: float) -> bool:
        """Wait until job ``token``'s output has ended (True at once if it never began).
        Any thread; the hub's thread takes the job's messages in meanwhile."""
        job = self._jobs.get(token)
        return job is None or job.closed.wait(timeout)


def whole_lines(buffered: bytes) -> Tuple[bytes, bytes]:
    """``buffered`` output as what may be written now and what waits for more: its whole
    lines, and the line not ended yet; or, for a line longer than `_MAX_PARTIAL`, a piece
    of it (no end of line) cut between two UTF-8 characters, which the caller writes as
    is, the line going on with its next piece (no prefix, no newline added)."""
    end = buffered.rfind(b"\n") + 1
    if end == 0 and len(buffered) >= _MAX_PARTIAL:
        end = _utf8_cut(buffered)
    return buffered[:end], buffered[end:]


def _utf8_cut(data: bytes) -> int:
    """The length of ``data`` without a UTF-8 character its end cuts in two."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a character's first byte: how many it takes
            size = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) - back if size > back else len(data)
    return len(data)  # not UTF-8 there: as it is


def _lines(text: str, head: bool, prefixed: Callable[[str], str]) -> str:
    """``text`` (whole lines, or a piece of a long line: no end of line) with each line
    made ``prefixed(line)``, but its first if it goes on with one written in part
    (``head``)."""
    ends = text.endswith("\n")
    lines = (text[:-1] if ends else text).split("\n")
    out = [line if head and i == 0 else prefixed(line) for i, line in enumerate(lines)]
    return "\n".join(out) + ("\n" if ends else "")


def _tag_to_prefix(job: _JobOutput, line: str) -> str:
    """A tagged job's line with its tag made its prefix (see `_JobOutput`)."""
    tag = _TAG.match(line)
    if tag is None:
        return job.prefix + line
    prefix = f"({tag.group(1)}@{job.host}) " if job.prefix else ""
    return prefix + line[tag.end():]


def _emit(fd: int, job: _JobOutput, data: bytes) -> None:
    """Write whole lines (``data`` ends with a line's end), or a piece of a long line,
    with the job's prefix."""
    text = data.decode("utf-8", "replace")
    head, job.open[fd - 1] = job.open[fd - 1], not text.endswith("\n")
    if job.tagged:
        text = _lines(text, head, lambda line: _tag_to_prefix(job, line))
    elif job.prefix:
        text = _lines(text, head, lambda line: job.prefix + line)
    stream: Optional[Any] = sys.stdout if fd == 1 else sys.stderr
    if stream is None:
        return
    try:
        if stream is (sys.__stdout__ if fd == 1 else sys.__stderr__):
            # This process's own stdout: to its file descriptor, in one write, as a
            # multiprocessing child's line goes. Through the stream, the line would land
            # in the middle of one that another thread is printing (print writes its
            # words one by one and flushes at the end), and flush half of it. (With
            # PYTHONUNBUFFERED, print() writes each word at once: a job's line can then
            # land between two words of this process's own, as a multiprocessing
            # child's can.)
            _write_all(stream.fileno(), text.encode(stream.encoding or "utf-8", "replace"))
        else:  # replaced (a notebook's or a test's capture): through it
            stream.write(text)
            stream.flush()
    except (OSError, ValueError, AttributeError):
        pass  # a closed or broken stdout: the job's own log has the output


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
