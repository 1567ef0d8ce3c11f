"""The output of a job of several pool workers, a line at a time, each line tagged with its
worker's name: ``(PoolWorker-3) text``.

A group's workers would otherwise write straight to the job's stdout and stderr, whose
lines the master prefixes with the job's name, and whose lines two workers could split
between them. Where the job's output is forwarded, each worker writes to pipes of its own
instead; the group reads them in its loop and writes each whole line, tagged, to its own
fds 1 and 2 (the job's log holds the tagged lines); the master's printer puts the job's
host into the tag (`fiber.process._printer`). A worker waits before it sends results until
the group has read what it wrote (`fiber.process._output.sync` on its pipes), and the
group, before it relays results, until what it wrote has left the job: a task's lines
still come before its result. A worker's pipes are read to their end, also after it died.
"""

from __future__ import annotations

import os
import selectors
from typing import Dict, List, Tuple

from ..process._printer import whole_lines

__all__ = ["Stream", "WorkerPipes"]

class Stream:
    """One worker's stdout or stderr, as the group reads it."""

    __slots__ = ("fd", "target", "tag", "partial", "open")

    def __init__(self, fd: int, target: int, tag: bytes) -> None:
        self.fd = fd  # the pipe's read end
        self.target = target  # 1 or 2: where its lines go
        self.tag = tag  # b"(PoolWorker-3) "
        self.partial = b""
        self.open = False  # a long line was written in part: its rest is not tagged


class WorkerPipes:
    """The pipes of a group's workers (see the module docstring)."""

    def __init__(self, selector: selectors.BaseSelector) -> None:
        self.selector = selector
        self.streams: Dict[int, Stream] = {}  # read end -> its stream
        self.by_worker: Dict[int, List[Stream]] = {}  # worker id -> its two streams
        #: Whether lines were written since the group last waited for them to leave.
        self.wrote = False

    def make(self) -> Tuple[int, int, int, int]:
        """A new worker's pipes, before the fork: ``(out_r, out_w, err_r, err_w)``."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        return out_r, out_w, err_r, err_w

    def in_worker(self, pipes: Tuple[int, int, int, int]) -> None:
        """In the forked worker: its fds 1 and 2 are its pipes' write ends; it holds no
        read end (its siblings' neither)."""
        out_r, out_w, err_r, err_w = pipes
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in (out_r, out_w, err_r, err_w, *self.streams):
            os.close(fd)
        self.streams.clear()
        self.by_worker.clear()

    def watch(self, worker_id: int, name: str, pipes: Tuple[int, int, int, int]) -> None:
        """In the group, once worker ``worker_id`` (``name``) is forked: read its pipes
        from now on."""
        out_r, out_w, err_r, err_w = pipes
        os.close(out_w)
        os.close(err_w)
        tag = f"({name}) ".encode()
        made = self.by_worker[worker_id] = []
        for fd, target in ((out_r, 1), (err_r, 2)):
            os.set_blocking(fd, False)
            stream = self.streams[fd] = Stream(fd, target, tag)
            self.selector.register(fd, selectors.EVENT_READ, stream)
            made.append(stream)

    def drop(self, pipes: Tuple[int, int, int, int]) -> None:
        """The fork failed: its pipes are not needed."""
        for fd in pipes:
            os.close(fd)

    def read(self, stream: Stream, chunks: int = 16) -> None:
        """Read what ``stream`` holds now (at most ``chunks`` reads: a worker that writes
        without pause must not keep the group from its other work) and write its whole
        lines, tagged; at its end (every writer closed it), its unfinished line too, and
        forget it. Nothing if it was forgotten already: a select's events can name a
        stream that the group drained to its end earlier in the same round (its worker
        ended: `drain`), whose fd may even be a new worker's pipe by now."""
        if self.streams.get(stream.fd) is not stream:
            return
        for _ in range(chunks):
            try:
                data = os.read(stream.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._end(stream)
                return
            lines, stream.partial = whole_lines(stream.partial + data)
            if lines:
                self._write(stream, lines)

    def _write(self, stream: Stream, chunk: bytes) -> None:
        """Write ``chunk`` (whole lines, or a piece of a long line: see `whole_lines`),
        each line tagged, but one going on with a piece written before."""
        ends = chunk.endswith(b"\n")
        lines = (chunk[:-1] if ends else chunk).split(b"\n")
        text = (b"" if stream.open else stream.tag) + (b"\n" + stream.tag).join(lines) \
            + (b"\n" if ends else b"")
        stream.open = not ends
        view = memoryview(text)
        try:
            while view:
                view = view[os.write(stream.target, view):]
        except OSError:
            return  # the job's stdout is gone: nobody reads its lines
        self.wrote = True

    def _end(self, stream: Stream) -> None:
        if stream.partial or stream.open:  # its last words end a line
            self._write(stream, stream.partial + b"\n")
            stream.partial = b""
        self.selector.unregister(stream.fd)
        del self.streams[stream.fd]
        os.close(stream.fd)

    def drain(self, worker_id: int) -> None:
        """Read what worker ``worker_id``, which ended, left in its pipes (a process it
        started may still hold them: what they hold now, the rest as it comes)."""
        for stream in self.by_worker.pop(worker_id, []):
            self.read(stream, chunks=1024)
