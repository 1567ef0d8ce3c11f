"""``Connection.fileno()``: a descriptor readable while a ``recv`` would not block.

A fiber pipe's messages wait on the hub of the pipe's creator, not in this process, so
there is no descriptor of the kernel's to hand out. The first ``fileno()`` of an end
makes one: the read end of an OS pipe, made readable by a watcher thread while the end
has a message waiting (or its other end is closed everywhere: ``recv`` raises
``EOFError`` at once), so that ``select``, ``selectors``, ``asyncio``'s ``add_reader`` and
``multiprocessing.connection.wait`` work on it as on a ``multiprocessing`` connection:

    watcher thread (fiber-fileno)                 this process's recv()
    ─────────────────────────────                 ─────────────────────
    conn.poll(1 s) on the hub ── ready ──▶ one byte in the pipe: readable
    wait until a recv took a message          ──▶ consumed(): the byte read back at once,
    (or, every second, poll(0) again: another     before recv returns: never readable
    process may have taken it)                    while nothing waits
    ── and poll again

The byte is taken back by ``recv`` itself, before it returns, so the descriptor is never
readable after the last message was taken here (a ``select`` loop cannot block in
``recv``); after a ``recv`` it is readable again one round trip later if more is waiting.
Each watched end costs a thread (and, outside the pipe's creator, a connection to its
hub) until it is closed or collected.
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

__all__ = ["FilenoWatch"]

_POLL_S = 1.0


class FilenoWatch:
    """The descriptor of one connection end, and the thread that keeps it truthful."""

    def __init__(self, conn: Any, readable: bool = True) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        self._cond = threading.Condition()
        self._raised = False
        self._taken = 0  # messages taken by recv in this process (a generation count)
        self._closed = False
        if readable:
            threading.Thread(target=self._run, args=(weakref.ref(conn),), daemon=True,
                             name="fiber-fileno").start()

    def fileno(self) -> int:
        return self._r

    def consumed(self) -> None:
        """A ``recv`` of this process took a message: not readable until the watcher has
        seen that another one waits."""
        with self._cond:
            self._taken += 1
            self._show(False)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            os.close(self._w)
            os.close(self._r)

    def _show(self, ready: bool) -> None:  # under the condition's lock
        if ready == self._raised or self._closed:
            return
        if ready:
            os.write(self._w, b"!")
        else:
            os.read(self._r, 1)
        self._raised = ready

    def _run(self, ref: Any) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
                taken = self._taken
            conn = ref()
            if conn is None:
                self.close()
                return
            try:
                ready = conn.poll(0 if self._raised else _POLL_S)
            except EOFError:  # the pipe's server is gone: recv raises at once, for good
                ready = True
            except Exception:  # closed here (OSError), or this process is ending
                self.close()
                return
            finally:
                del conn
            with self._cond:
                if taken == self._taken:  # no recv took a message meanwhile
                    self._show(ready)
                if self._raised and not self._closed:
                    self._cond.wait_for(self._changed(taken), _POLL_S)

    def _changed(self, taken: int) -> Any:
        """A predicate: a recv took a message since ``taken``, or the watch is closed."""
        return lambda: self._taken != taken or self._closed
