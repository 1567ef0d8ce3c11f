"""What programs use of a pool beyond ``multiprocessing.Pool``'s documented API
(``pool._pool``, ``pool._state``, ``_repopulate_pool()``, the original fiber's
``start_workers()``), as a mixin of `fiber.pool.Pool`. What each does here:
docs/contributing/pools.md, "Beyond multiprocessing's API"."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, List, Optional

from ..errors import TimeoutError as FiberTimeoutError
from ._poolcore import CLOSE, RUN, TERMINATE

if TYPE_CHECKING:
    from ..process import Process

__all__ = ["PoolExtras", "check_error_handling", "INIT", "RUN", "CLOSE", "TERMINATE"]

#: The states of a pool, as ``multiprocessing.pool`` names them (``pool._state``).
INIT = "INIT"  # multiprocessing.pool's; a fiber pool is RUN once made (see _poolcore)

_POLL_S = 0.02


def check_error_handling(error_handling: Optional[bool]) -> None:
    """Checks the original fiber's ``Pool(n, error_handling=...)``. Every pool here gives
    a dead worker's tasks to the others (with ``False`` the original lost them); ``True``
    also runs again a task that raised (see `fiber.pool.Pool`).

    Raises:
        TypeError: ``error_handling`` is not a bool (or None).
    """
    if error_handling is not None and not isinstance(error_handling, bool):
        raise TypeError(f"error_handling must be a bool, not {type(error_handling).__name__!r}")


class PoolExtras:
    """``_pool``, ``_repopulate_pool``, ``start_workers`` and ``wait_until_workers_up``
    (see the module)."""

    _core: Any

    @property
    def _pool(self) -> List[Process]:
        """The worker processes started and not lost (a new list at each read), each with
        its pid: right after ``Pool()``, once its maintainer has started its first
        workers; a replacement is listed once its start returned."""
        core = self._core
        core.workers_known.wait()
        with core.hub.lock:
            started = {id(job) for job in core.procs.values()}
            return [ws.process for ws in core.live_workers() if id(ws.job) in started]

    @property
    def _state(self) -> str:
        """``RUN``, ``CLOSE`` or ``TERMINATE``, as ``multiprocessing.Pool._state``."""
        return str(self._core.state)

    def _repopulate_pool(self) -> None:
        """Return once the pool has its size of workers up: its maintainer replaces the
        workers that ended (see the module).

        Raises:
            ValueError: the pool is closed or terminated.
            BrokenPoolError: its workers keep failing to start.
        """
        self.wait_until_workers_up()

    def start_workers(self) -> None:
        """Start the workers (the original fiber's API): they already are.

        Raises:
            ValueError: the pool is closed or terminated.
            BrokenPoolError: its workers keep failing to start.
        """
        self._core.check_running()

    def wait_until_workers_up(self, timeout: Optional[float] = None) -> None:
        """Wait until every worker of the pool has started and connected.

        Raises:
            ValueError: the pool is closed or terminated.
            BrokenPoolError: workers keep failing to start (an initializer raising, a job
                the cluster cannot run), so they never will be.
            fiber.TimeoutError: ``timeout`` seconds passed first.
        """
        core = self._core
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with core.hub.lock:
                core.check_running()
                # started: its start returned (a local job can connect before that, while
                # its Process still says "initial" and is_alive() is False)
                started = {id(job) for job in core.procs.values()}
                up = sum(1 for ws in core.live_workers()
                         if ws.connected and not ws.retiring and id(ws.job) in started)
                if up >= core.size:
                    return
            if deadline is not None and time.monotonic() >= deadline:
                raise FiberTimeoutError(f"{up} of the pool's {core.size} workers are up "
                                        f"after {timeout} s")
            time.sleep(_POLL_S)
