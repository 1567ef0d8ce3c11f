"""``Connection.fileno()``: a descriptor readable while a ``recv`` would not block, so that
``select``, ``selectors`` and ``asyncio`` work on a fiber pipe end, whose messages wait on
a hub. The design: docs/contributing/transport.md, "A pipe end's descriptor"."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable

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

    def _run(self, ref: weakref.ref[Any]) -> None:
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

    def _changed(self, taken: int) -> Callable[[], bool]:
        """A predicate: a recv took a message since ``taken``, or the watch is closed."""
        return lambda: self._taken != taken or self._closed
