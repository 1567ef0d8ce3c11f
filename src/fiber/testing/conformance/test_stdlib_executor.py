"""The standard library's own ``concurrent.futures.ProcessPoolExecutor`` with a fiber context,
and multiprocessing's own pipes and queues handed to fiber processes (fiber.process._fd_handoff).

These objects reach only jobs of this host (``Backend.jobs_share_host``); on other backends
the tests that need them are skipped, and ``test_other_hosts_are_refused_at_start`` checks
the error given there instead.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import multiprocessing.connection
import sys
import threading
from multiprocessing import resource_sharer

import pytest

import fiber
from fiber.backends import get_backend, register_backend
from fiber.backends.local import LocalBackend
from fiber.errors import ProcessError

from .support import helpers
from .support import stdlib_executor_helpers as h
from .support.waiting import wait_until


@pytest.fixture(autouse=True)
def stop_resource_sharer():
    """The standard library keeps its resource sharer's thread (which hands descriptors to
    jobs) for the life of the program, as multiprocessing does; the leak check would count
    it, so it is stopped after each test (the next use starts it again)."""
    yield
    resource_sharer.stop(timeout=30)


@pytest.fixture
def host_ctx(ctx, backend_name):
    """The context under test, when its jobs share this host."""
    if not get_backend(backend_name).jobs_share_host:
        pytest.skip(f"jobs of {backend_name} do not share this host: multiprocessing's "
                    "objects cannot reach them (see test_other_hosts_are_refused_at_start)")
    return ctx


def test_submit_map_and_the_remote_traceback(host_ctx):
    with cf.ProcessPoolExecutor(2, mp_context=host_ctx) as ex:
        assert ex.submit(h.add, 2, b=3).result(60) == 5
        assert list(ex.map(h.square, range(10), timeout=60)) == [x * x for x in range(10)]
        assert list(ex.map(h.add, range(7), range(7), chunksize=3, timeout=60)) == [
            2 * x for x in range(7)]
        f = ex.submit(helpers.raise_value_error, "bad input")
        with pytest.raises(ValueError, match="bad input") as err:
            f.result(60)
        assert isinstance(err.value.__cause__, cf.process._RemoteTraceback)
        assert "raise_value_error" in str(err.value.__cause__)
        assert ex.submit(h.square, 4).result(60) == 16  # the pool goes on


def test_initializer_sets_what_the_tasks_read(host_ctx):
    with cf.ProcessPoolExecutor(2, mp_context=host_ctx, initializer=h.load_model,
                                initargs=("loaded",)) as ex:
        results = list(ex.map(h.model_and_pid, range(8), timeout=60))
    assert [r[:2] for r in results] == [("loaded", i) for i in range(8)]


@pytest.mark.skipif(sys.version_info < (3, 11), reason="max_tasks_per_child is new in 3.11")
def test_max_tasks_per_child_replaces_workers(host_ctx):
    # 1, not 2: with more than one task per child and a backlog, CPython's own executor
    # never replaces the worker that retires (gh-115634, with any context)
    with cf.ProcessPoolExecutor(1, mp_context=host_ctx, max_tasks_per_child=1) as ex:
        results = list(ex.map(h.model_and_pid, range(4), timeout=120))
    assert [r[1] for r in results] == list(range(4))
    assert len({r[2] for r in results}) == 4


def test_shutdown_cancels_queued_futures(host_ctx):
    release = host_ctx.Event()
    ex = cf.ProcessPoolExecutor(1, mp_context=host_ctx)
    try:
        busy = ex.submit(h.wait_for, release)
        wait_until(busy.running, 60, message="the first call to reach the call queue")
        queued = [ex.submit(h.square, i) for i in range(20)]
        ex.shutdown(wait=False, cancel_futures=True)
        release.set()
        assert busy.result(60) == "released"
        cancelled = [f for f in queued if f.cancelled()]
        assert len(cancelled) >= 15  # all but the few already in the call queue
        # the others run (a later shutdown(wait=True) would not wait for them: the stdlib
        # forgets its thread in the first shutdown; nor would cf.wait() count the
        # cancelled ones, which the stdlib does not notify)
        assert all(f.result(60) == i * i for i, f in enumerate(queued) if not f.cancelled())
    finally:
        release.set()
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(h.square, 1)


def test_shutdown_without_waiting_still_finishes_the_work(host_ctx):
    ex = cf.ProcessPoolExecutor(2, mp_context=host_ctx)
    futures = [ex.submit(h.square, i) for i in range(10)]
    ex.shutdown(wait=False)
    assert [f.result(60) for f in futures] == [i * i for i in range(10)]
    # its threads and workers end by themselves: the leak check waits for them


def test_a_killed_worker_breaks_the_pool_instead_of_hanging(host_ctx):
    with cf.ProcessPoolExecutor(2, mp_context=host_ctx) as ex:
        assert ex.submit(h.square, 2).result(60) == 4
        f = ex.submit(helpers.kill_self)
        with pytest.raises(cf.process.BrokenProcessPool):
            f.result(60)
        with pytest.raises(cf.process.BrokenProcessPool):
            ex.submit(h.square, 3)


def test_multiprocessing_queue_and_pipe_reach_a_fiber_process(host_ctx):
    requests = multiprocessing.get_context("spawn").Queue()
    mine, theirs = multiprocessing.Pipe()
    p = host_ctx.Process(target=h.echo_through, args=(requests, theirs))
    p.start()
    theirs.close()
    for i in range(3):
        requests.put(i)
        assert mine.poll(60)
        assert mine.recv()[:2] == ("echo", i)
    requests.put(None)
    p.join(60)
    assert p.exitcode == 0
    assert mine.poll(60)
    with pytest.raises(EOFError):  # the child's end closed: the descriptor was its own
        mine.recv()
    requests.close()
    requests.join_thread()


class Elsewhere(LocalBackend):
    """A backend whose jobs do not share this host (they are started here all the same)."""

    name = "elsewhere"
    jobs_share_host = False


def test_multiprocessing_shared_memory_reaches_a_fiber_process(host_ctx):
    # multiprocessing's shared ctypes live in an Arena (an mmap of a descriptor); without a
    # lock (whose semaphore asks for spawning itself) nothing else said so (CPython's own
    # Barrier tests hand such memory to their processes)
    mp = multiprocessing.get_context("spawn")
    value, array = mp.RawValue("i", 1), mp.RawArray("d", [0.5, 1.5])
    p = host_ctx.Process(target=h.double_shared, args=(value, array))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert (value.value, array[:]) == (2, [1.0, 3.0])  # the child wrote to the same memory


def test_connection_and_socket_sent_over_a_fiber_pipe(host_ctx):
    """As multiprocessing sends them through a pipe: the descriptor is handed over by the
    sender's resource sharer, which the parent may use since a job takes its parent's
    multiprocessing authkey (plain pickle would copy the descriptor's number)."""
    ours, theirs = host_ctx.Pipe()
    p = host_ctx.Process(target=h.send_descriptors, args=(theirs,))
    p.start()
    try:
        assert ours.recv() == bytes(multiprocessing.current_process().authkey)
        conn = ours.recv()
        assert isinstance(conn, multiprocessing.connection.Connection)
        assert conn.poll(60) and conn.recv() == "over a multiprocessing pipe"
        sock = ours.recv()
        sock.settimeout(60)
        assert sock.recv(100) == b"over a socket"
        conn.close()
        sock.close()
        ours.send("done")
    finally:
        p.join(60)
    assert p.exitcode == 0


def test_other_hosts_are_refused_at_start(ctx, backend_name):
    if get_backend(backend_name).jobs_share_host:
        register_backend("elsewhere", Elsewhere)
        ctx = fiber.get_context("elsewhere")
    mine, theirs = multiprocessing.Pipe()
    p = ctx.Process(target=helpers.take, args=(theirs,))
    with pytest.raises(ProcessError, match="reach only processes of this host"):
        p.start()
    with cf.ProcessPoolExecutor(1, mp_context=ctx) as ex:
        with pytest.raises(ProcessError, match="fiber.futures.Executor"):
            ex.submit(h.square, 2)
    mine.close()
    theirs.close()


def test_what_a_process_that_cannot_start_was_handed_is_released(ctx):
    """Pickling fails after a pipe end was handed over: it is released at once (the other
    end sees EOF; a descriptor registered for the job is closed), not kept for a job that
    will never exist."""
    mine, theirs = ctx.Pipe()
    p = ctx.Process(target=helpers.take, args=(theirs, threading.Lock()))
    with pytest.raises(TypeError):
        p.start()
    theirs.close()
    assert mine.poll(60)
    with pytest.raises(EOFError):
        mine.recv()
    mine.close()


def test_a_descriptor_handed_to_a_process_that_cannot_start_is_closed(host_ctx):
    mine, theirs = multiprocessing.Pipe()
    sharer = resource_sharer._resource_sharer  # type: ignore[attr-defined]
    p = host_ctx.Process(target=helpers.take, args=(theirs, threading.Lock()))
    with pytest.raises(TypeError):
        p.start()
    assert not sharer._cache
    mine.close()
    theirs.close()
