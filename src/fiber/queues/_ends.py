"""The ``reader`` and ``writer`` of the original fiber's ``SimpleQueuePush`` (its
``SimpleQueue``): the two ZeroMQ connections it held, which programs written for it print
or use (``q.reader.recv()``, ``q.writer.send(x)``). Here a queue is one service on its
creator's hub, so each end is a view of the queue: ``recv()`` is ``get()`` and
``send(obj)`` is ``put(obj)``, from any process (unlike ``_reader``, the standard
library's private pipe end, which exists in the creating process only: see
`fiber.queues._reader`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["QueueEnd"]


class QueueEnd:
    """One end of a queue, as the original fiber's ``SimpleQueuePush`` had them."""

    def __init__(self, queue: Any, writable: bool) -> None:
        self._queue = queue
        self._writable = writable

    @property
    def readable(self) -> bool:
        return not self._writable

    @property
    def writable(self) -> bool:
        return self._writable

    def recv(self) -> Any:
        """The queue's next item (``get()``).

        Raises:
            OSError: this is the writer.
        """
        if self._writable:
            raise OSError("this is the queue's writer: recv() is the reader's")
        return self._queue.get()

    def send(self, obj: object) -> None:
        """Put ``obj`` on the queue (``put(obj)``).

        Raises:
            OSError: this is the reader.
        """
        if not self._writable:
            raise OSError("this is the queue's reader: send() is the writer's")
        self._queue.put(obj)

    def close(self) -> None:
        """Nothing to close: the queue's connections are shared by the process."""

    def __repr__(self) -> str:
        kind = "writer" if self._writable else "reader"
        return f"<fiber queue {kind} of {self._queue!r}>"
