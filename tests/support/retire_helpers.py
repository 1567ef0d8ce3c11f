"""A pool worker stopped by its cluster mid-map retires (issue 29): the check every
cluster backend's tests run with its own way of stopping a worker (``docker stop``, a
pod deleted with a grace period, SIGTERM on local). Its targets are importable by jobs
(tests/ is on their path, mounted into containers and pods)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable, Dict, List

from fiber.testing.conformance.support.waiting import wait_until


def mark_then_sleep(x: int, marks: str, seconds: float) -> int:
    """Mark the start of this run (a file a run: a task run twice leaves two), work."""
    with open(os.path.join(marks, f"{x}-{socket.gethostname()}-{os.getpid()}"), "w"):
        pass
    time.sleep(seconds)
    return x


def starts(marks: str) -> Dict[int, List[str]]:
    """Task -> the runs that started it."""
    out: Dict[int, List[str]] = {}
    for name in os.listdir(marks):
        x, host, pid = name.split("-", 2)
        out.setdefault(int(x), []).append(f"{host}:{pid}")
    return out


def check_a_stopped_worker_retires(ctx: Any, marks: str, stop: Callable[[Any], None],
                                   records: Callable[[], List[Any]]) -> None:
    """Pool(2), 48 tasks of 0.5 s (enough that a cluster slow to deliver the stop, a
    loaded Kubernetes node, still finds the map running: ci8 saw 24 end first); once 4
    have started, ``stop(worker status)`` stops a worker the cluster's way. Every result
    once, no task started twice, no retry counted, one INFO line saying it retires, no
    WARNING (``records``: fiber's log records so far)."""
    os.chmod(marks, 0o777)
    with ctx.Pool(2) as pool:
        result = pool.starmap_async(mark_then_sleep, [(x, marks, 0.5) for x in range(48)],
                                    chunksize=1)
        wait_until(lambda: result.ready() or len(os.listdir(marks)) >= 4, 300,
                   interval=0.2, message="four tasks started")
        if result.ready():  # the tasks failed (they cannot write their marks?): say why
            result.get(0)
        victim = next(w for w in pool.status().workers if w.state == "running")
        stop(victim)
        assert result.get(timeout=300) == list(range(48))
        # A loaded node's kubelet may deliver the stop after the whole map (ci22: none of
        # the 48 tasks was left): the worker then retires idle, and says so just as well.
        wait_until(lambda: any(" retires: " in r.getMessage() for r in records()
                               if r.name == "fiber"), 120, interval=0.2,
                   message="the stopped worker to say it retires")
        status = pool.status()
    runs = starts(marks)
    assert sorted(runs) == list(range(48))
    assert all(len(r) == 1 for r in runs.values()), runs
    assert status.retried == 0
    said = [r for r in records() if r.name == "fiber"]
    retired = [r for r in said if " retires: " in r.getMessage()]
    assert len(retired) == 1 and retired[0].levelname == "INFO", [r.getMessage() for r in said]
    assert retired[0].getMessage().startswith(victim.name)
    assert not [r for r in said if r.levelname == "WARNING"], [r.getMessage() for r in said]
