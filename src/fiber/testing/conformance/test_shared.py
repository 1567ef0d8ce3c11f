"""Large read-only data handed to many processes: pickled once, sent once per host, mapped.

The data here is 64 MB (an evolution-strategies noise table is 100 MB and more). Workers
are identified by OS pid to read their memory use from ``/proc/PID/smaps`` (local and
netns backends: ``local_pids``).
"""

from __future__ import annotations

import contextlib
import pickle
from typing import Any, List, TypeVar

import numpy as np
import pytest

import fiber

from .support import shared_helpers as sh

T = TypeVar("T")

MB = 1 << 20
SIZE = 64 * MB


@pytest.fixture(scope="module")
def table() -> np.ndarray:
    return np.random.default_rng(7).standard_normal(SIZE // 8)


def _get_all(q: fiber.queues.Queue[T], n: int) -> List[T]:
    return [q.get(timeout=120) for _ in range(n)]


def _pss_kb(pid: int, address: int) -> int:
    """Proportional set size of the mapping of ``pid`` that holds ``address``."""
    inside = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            field = line.split()
            if not field[0].endswith(":"):  # a mapping's first line: "lo-hi perms ..."
                lo, hi = (int(x, 16) for x in field[0].split("-"))
                inside = lo <= address < hi
            elif inside and field[0] == "Pss:":
                return int(field[1])
    raise AssertionError(f"no mapping of {pid} holds {address:#x}")


@pytest.mark.local_pids
def test_pool_initarg_reaches_every_worker_once_per_host(
        ctx: fiber.FiberContext, table: np.ndarray) -> None:
    """Every worker's initializer gets the table intact, writable (copy on write), and the
    workers of one host together use about one copy of it, not one each."""
    n = 6
    q = ctx.Queue()
    with ctx.Pool(n, initializer=sh.keep, initargs=(table, q)) as pool:
        reports = _get_all(q, n)
        assert all(r[3] == sh.crc(table) for r in reports), "a worker got other data"
        assert all(r[4] for r in reports), "the table should be writable (copy on write)"
        hosts = {r[1] for r in reports}
        pss = sum(_pss_kb(r[0], r[2]) for r in reports) * 1024
        # one copy per host (plus slack), where a copy per worker would be n copies
        assert pss < (len(hosts) + 0.5) * SIZE, (pss / SIZE, len(hosts))
        assert pool.map(sh.crc, [b"x"]) == [sh.crc(b"x")]  # the pool still works


def test_a_write_never_reaches_other_workers(ctx: fiber.FiberContext, table: np.ndarray) -> None:
    """Workers one after the other (one task each) overwrite the table: the next one
    finds it intact, and so does the master."""
    before = sh.crc(table)
    q = ctx.Queue()
    with ctx.Pool(1, initializer=sh.keep, initargs=(table, q), maxtasksperchild=1) as pool:
        results = pool.map(sh.scribble, range(2), chunksize=1)
        _get_all(q, 2)
    assert [found for found, _ in results] == [before] * 2
    assert all(after != before for _, after in results)
    assert sh.crc(table) == before


def test_shared_handle_unpickles_to_the_data_once_per_host(
        ctx: fiber.FiberContext, table: np.ndarray, backend_name: str) -> None:
    """``fiber.shared``: processes get the array itself; the publisher sends it to each
    process of its own host as a descriptor, and over the network once per other host.
    The processes stay until all have reported: a host's holder that exits is forgotten,
    and the next process of its host fetches the data again (jobs of a cluster start at
    their own pace)."""
    handle = fiber.shared(table)
    q, done = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=sh.report_shared, args=(handle, q, done)) for _ in range(6)]
    for p in procs:
        p.start()
    try:
        reports = _get_all(q, len(procs))
    finally:
        done.set()
    for p in procs:
        p.join(60)
    assert all(r[3] == sh.crc(table) for r in reports)
    here = sh.host_of_this_process()
    other_hosts = {r[1] for r in reports} - {here}
    sent = handle.transfers()
    assert sent["other_host"] <= len(other_hosts), (sent, other_hosts)
    assert sent["same_host"] == sum(r[1] == here for r in reports)
    assert pickle.loads(pickle.dumps(handle)) is table  # in the publisher: the original


def test_a_write_never_reaches_the_host_copy(
        ctx: fiber.FiberContext, table: np.ndarray, backend_name: str) -> None:
    """A process that overwrites its table while it keeps it mapped (and, on another
    host than the publisher's, holds the host's copy) changes nothing for the next one."""
    pin: Any = contextlib.nullcontext()
    if backend_name == "netns":  # fiber's own test hosts (its checkout's tests/fiber_ci)
        from fiber_ci.netns import on_host

        pin = on_host(1)
    handle = fiber.shared(table)
    q, done = ctx.Queue(), ctx.Event()
    with pin:
        writer = ctx.Process(target=sh.scribble_and_wait, args=(handle, q, done))
        writer.start()
        found, after, writer_host = q.get(timeout=120)
        reader = ctx.Process(target=sh.report_shared, args=(handle, q))
        reader.start()
        report = q.get(timeout=120)
    done.set()
    writer.join(60)
    reader.join(60)
    assert found == sh.crc(table) and after != found
    assert report[3] == sh.crc(table)
    if backend_name == "netns":
        assert report[1] == writer_host  # the reader went through the writer's copy
        assert handle.transfers()["other_host"] == 1


def test_pool_initargs_with_a_pipe_end_and_a_large_array(
        ctx: fiber.FiberContext, table: np.ndarray) -> None:
    """Initargs that cannot be shared (a pipe end) still reach every worker."""
    a, b = ctx.Pipe()
    with ctx.Pool(2, initializer=sh.send_crc, initargs=(table, b)) as pool:
        assert [a.recv() for _ in range(2)] == [sh.crc(table)] * 2
        assert pool.map(sh.crc, [b"y"]) == [sh.crc(b"y")]
    a.close()
    b.close()


