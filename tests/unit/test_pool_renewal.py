"""A pool's renewal ahead of its workers' known end (``maxtasksperchild``'s cousin for
walltimes, ``fiber.pool._renew``) against the rest of its life cycle: a worker lost in
the same pass of the maintainer, and ``resize()``. Driven through the real PoolService
handlers with a recording server, as ``test_pool_stranded.py``; the maintainer's loop
(``PoolCore._maintain``) runs on a core built without its backend, threads and hub
(`_core`: it starts stand-in worker records, not jobs). Each test fails on the code
before its fix."""

from __future__ import annotations

import os
import threading
import types
from typing import Any, List, Optional, Tuple

from test_pool_late import TimedServer, bare_service

from fiber.pool._poolcore import CLOSE, RUN, PoolCore
from fiber.pool._protocol import WorkerHello
from fiber.pool._service import PoolService, WorkerState
from fiber.transport.peers import Peer


def _process(wid: int) -> Any:
    return types.SimpleNamespace(name=f"PoolWorker-{wid}", host="node1", cancelled=False,
                                 exitcode=None, job_id=f"1-{wid}", exit_reason="")


def _service(lifetime: Optional[float] = 100.0) -> Tuple[PoolService, TimedServer]:
    service, server = bare_service()
    service.lifetime = lifetime
    return service, server


def _add(service: PoolService, wid: int) -> WorkerState:
    ws = WorkerState(wid, process=_process(wid))  # type: ignore[arg-type]
    service.add_worker(ws)
    return ws


def _hello(service: PoolService, server: TimedServer, ws: WorkerState) -> None:
    peer = Peer(100 + ws.worker_id, b"job", False, None)
    service.hello(server, peer, b"", WorkerHello(ws.worker_id))  # type: ignore[arg-type]


# -- 1. the maintainer drops renewals that fall due in a pass that also starts workers --


class _Selector:
    """Stands for the maintainer's selector: the first wait ends the pool (closed,
    nothing to drain)."""

    def __init__(self, core: Any) -> None:
        self.core = core

    def select(self, timeout: Optional[float]) -> List[Any]:
        self.core.state = CLOSE
        self.core.service.closing = True
        return []

    def close(self) -> None:
        pass


def _core(service: PoolService, size: int) -> Any:
    core = PoolCore.__new__(PoolCore)
    core.hub = types.SimpleNamespace(lock=threading.RLock())
    core.service = service
    core.state = RUN
    core.size = size
    core.broken = None
    core.procs = {}
    core.workers_known = threading.Event()
    core._exits = _Selector(core)
    core._wake_r, core._wake_w = os.pipe()
    core._wake_lock = threading.Lock()
    core.name = b"pool-test"
    core.started = []
    next_id = iter(range(100, 200))

    def start(count: int, replaces: Optional[List[WorkerState]] = None) -> None:
        core.started.append((count, [ws.worker_id for ws in replaces or []]))
        for i in range(count):
            ws = _add(service, next(next_id))
            if replaces:
                ws.replaces = replaces[i]

    core._start_workers = start
    return core


def test_a_renewal_due_while_a_lost_worker_is_replaced_is_not_dropped() -> None:
    """size=2: worker A's renewal falls due as B is lost. The maintainer's pass took the
    renewal (marking A renewed, its slot first for the next worker), then started B's
    replacement and went round again, dropping it: A was never renewed (its walltime
    ended it), and B's replacement took A's place."""
    service, server = _service()
    a, b = _add(service, 1), _add(service, 2)
    _hello(service, server, a)
    _hello(service, server, b)
    a.renew_at = 1.0  # due (monotonic: long past)
    b.renew_at = 0.0
    service.worker_lost(b)
    core = _core(service, 2)
    PoolCore._maintain(core)
    assert core.started == [(1, []), (1, [1])]  # B's replacement, then A's
    b2, a2 = service.workers[100], service.workers[101]
    assert (b2.slot, a2.slot) == (b.slot, a.slot) and a2.replaces is a


# -- 2. a renewal's replacement retired by resize before its hello retires its old one --


def test_a_replacement_retired_by_resize_does_not_retire_the_worker_it_renews() -> None:
    """size=3 (A, B, C); A's replacement A2 is started (active 4). resize(2) retires 2:
    A2 (not connected: first) and one more. A2's hello then retires A as well: the pool
    runs at 1 worker below its size, and the maintainer starts yet another job."""
    service, server = _service()
    b, c, a = (_add(service, i) for i in (1, 2, 3))  # (A last: B is chosen with A2)
    for ws in (a, b, c):
        _hello(service, server, ws)
    a2 = _add(service, 4)
    a2.replaces = a
    assert service.active() == 4
    chosen = service.retire(service.active() - 2)  # Pool.resize(2)
    assert chosen == [a2, b]
    assert service.active() == 2
    _hello(service, server, a2)
    assert service.active() == 2 and not a.retiring  # A went on, A2 ends


# -- 3. a worker renewed and lost before its heir's hello gives its place once ---------


def test_a_renewed_worker_lost_before_its_heirs_hello_frees_its_place_once() -> None:
    """A renewal gives the worker's place (slot) to its heir; if the worker is lost (or
    its cluster retires it) before the heir's hello, its place is not freed again: two
    workers started later would share one slot (its renewal time, its restarts)."""
    service, server = _service()
    old = _add(service, 1)
    _hello(service, server, old)
    old.renew_at = 1.0  # due
    assert service.due_renewals(2.0) == [old]
    heir = _add(service, 2)
    heir.replaces = old
    assert heir.slot == old.slot and not service.free_slots
    service.worker_lost(old)  # before the heir's hello
    assert not service.free_slots
    later = _add(service, 3)
    assert later.slot != heir.slot
