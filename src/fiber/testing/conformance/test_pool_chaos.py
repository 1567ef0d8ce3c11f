"""fiber.Pool under chaos: 10,000 tiny tasks while a worker is SIGKILLed every 200 ms;
every result arrives, once, in the right place."""

from __future__ import annotations

import collections
import os
import random
import signal
import threading
from typing import List

import pytest

import fiber

from .support import pool_helpers as ph

N = 10_000
#: A task given up after this many of its workers were killed would fail the test by
#: the chaos's luck, not the pool's: on a loaded machine a replacement worker holds the
#: task it was handed for long enough that the same task was on 4 killed workers in a
#: row (with the default of 3 retries). The limit itself has its own tests.
RETRIES = 50
EXPECTED = [x * 3 + 1 for x in range(N)]  # pool_helpers.tiny
INTERVAL = 0.2


class Chaos:
    """A thread that SIGKILLs a random live worker of ``pool`` every ``INTERVAL`` s."""

    def __init__(self, pool) -> None:
        self.pool = pool
        self.killed: List[int] = []
        self._stop = threading.Event()
        self._rng = random.Random(1234)
        self._thread = threading.Thread(target=self._run, name="chaos-killer")

    def _live_pids(self) -> List[int]:
        pids = []
        for ws in list(self.pool._core.procs.values()):
            try:
                if ws.process.is_alive():
                    pids.append(ws.process.pid)
            except ValueError:  # closed in the meantime: it is gone
                pass
        return pids

    def _run(self) -> None:
        while not self._stop.wait(INTERVAL):
            pids = self._live_pids()
            if not pids:
                continue
            pid = self._rng.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.killed.append(pid)

    def __enter__(self) -> Chaos:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)


@pytest.mark.local_pids
def test_map_of_10000_tasks_while_workers_are_killed(ctx):
    with fiber.config.override(pool_max_task_retries=RETRIES), ctx.Pool(4) as pool:
        with Chaos(pool) as chaos:
            out = pool.map_async(ph.tiny, range(N), 1).get(timeout=240)
        assert len(out) == N
        assert out == EXPECTED  # every result, in order
        assert len(set(chaos.killed)) >= 5, chaos.killed  # the chaos did happen
        # the pool recovered: a full set of workers, and it still works
        assert pool.map_async(ph.square, range(20)).get(timeout=60) == [
            x * x for x in range(20)]


@pytest.mark.local_pids
def test_imap_unordered_under_chaos_delivers_each_result_exactly_once(ctx):
    with fiber.config.override(pool_max_task_retries=RETRIES), ctx.Pool(4) as pool:
        with Chaos(pool) as chaos:
            it = pool.imap_unordered(ph.tiny, range(N), 1)
            out = [it.next(timeout=120) for _ in range(N)]
            extra = []
            try:
                extra.append(it.next(timeout=60))
            except StopIteration:
                pass
        assert extra == []
        counts = collections.Counter(out)
        assert len(out) == N and set(counts) == set(EXPECTED)
        assert [v for v, c in counts.items() if c != 1] == []  # each exactly once
        assert len(set(chaos.killed)) >= 5, chaos.killed
