"""fiber.Pool when tasks fail: the crash matrix (fault x stage x API), retries of tasks
whose worker died, an initializer that raises, workers lost after close()."""

from __future__ import annotations

import functools
import os
import signal
import threading

import pytest

import fiber
from fiber.errors import (
    BrokenPoolError,
    MaybeEncodingError,
    RemoteError,
    RemoteTraceback,
    WorkerLostError,
)

from .support import pool_helpers as ph
from .support.waiting import recorded_jobs, wait_until

pytestmark = pytest.mark.timeout(120)

FAULTS = ("exception", "exit", "sigkill", "unpicklable")
KILLS = ("exit", "sigkill")
STAGES = ("pickling the task", "unpickling the task", "running the task",
          "pickling the result")
APIS = ("map", "imap", "apply_async")

# Pickling the task happens in the test process itself: an exit or a SIGKILL there would
# end the test run, not a worker, so that stage has only the exception and unpicklable
# faults.
CASES = [(fault, stage) for stage in STAGES for fault in FAULTS
         if not (stage == "pickling the task" and fault in KILLS)]

ITEMS = 5
BAD = 2  # the index of the faulty item among ITEMS


def bad_item(fault: str, stage: str):
    if stage == "pickling the task":
        return ph.RefusesPickling() if fault == "exception" else threading.Lock()
    if stage == "unpickling the task":
        return ph.UnpickleFault(fault)
    if stage == "running the task":
        return ph.RunFault(fault)
    return ph.ResultFault(fault)


def described(e: BaseException) -> str:
    """Everything an exception tells its reader: message, notes, remote traceback."""
    parts = [type(e).__name__, str(e), *getattr(e, "__notes__", [])]
    if isinstance(e.__cause__, RemoteTraceback):
        parts.append(e.__cause__.tb)
    return "\n".join(parts)


def run_api(pool, api: str, items):
    """Per item ("ok", value) or ("err", exception); for map, one outcome for the whole."""
    if api == "map":
        try:
            return [("ok", pool.map_async(ph.crash_target, items, 1).get(timeout=60))]
        except Exception as e:
            return [("err", e)]
    out = []
    if api == "imap":
        it = pool.imap(ph.crash_target, items)
        while True:
            try:
                out.append(("ok", it.next(timeout=60)))
            except StopIteration:
                return out
            except Exception as e:
                out.append(("err", e))
    results = [pool.apply_async(ph.crash_target, (x,)) for x in items]
    for r in results:
        try:
            out.append(("ok", r.get(timeout=60)))
        except Exception as e:
            out.append(("err", e))
    return out


def summary(got) -> str:
    return "\n".join(f"{kind} {type(v).__name__}: {str(v).splitlines()[0] if str(v) else ''}"
                     if kind == "err" else f"{kind} {v!r}" for kind, v in got)


def check_error(e: BaseException, fault: str, stage: str, api: str) -> None:
    text = described(e)
    if fault in KILLS:
        assert isinstance(e, WorkerLostError), text
        label = {"map": "map", "imap": "imap", "apply_async": "apply"}[api]
        # the item's place in the map, or the apply's among the pool's (one per item)
        assert f"{label}(crash_target) (task {BAD})" in str(e), text
        assert "killed its worker 2 times" in str(e), text  # pool_max_task_retries=1
        attempts = [ln for ln in str(e).splitlines() if ln.strip().startswith("attempt ")]
        assert len(attempts) == 2, text
        how = f"exit code {ph.EXIT_CODE}" if fault == "exit" else "SIGKILL"
        assert all(how in ln for ln in attempts), text
    elif stage == "pickling the result":  # as multiprocessing: MaybeEncodingError
        assert isinstance(e, MaybeEncodingError), text
        assert "error while pickling the result" in text, text
        if fault == "exception":
            assert f"fault:{stage}" in e.exc, text
        else:
            assert "pickle" in e.exc and "lock" in e.exc and "lock" in e.value, text
    elif fault == "exception":
        assert isinstance(e, ValueError), text
        assert str(e) == f"fault:{stage}", text
        if stage == "unpickling the task":
            assert f"error while {stage}" in text, text
    elif stage == "pickling the task":  # an unpicklable value
        assert isinstance(e, (TypeError, AttributeError, ValueError)), text
        assert "pickle" in str(e) and "lock" in str(e), text
    else:  # an exception that cannot travel back: stands in as RemoteError
        assert isinstance(e, RemoteError), text
        assert "UnpicklableError" in str(e) and f"fault:{stage}" in str(e), text


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("fault,stage", CASES)
def test_crash_matrix(ctx, fault, stage, api):
    items = [bad_item(fault, stage) if i == BAD else i for i in range(ITEMS)]
    # One worker: the items before the faulty one reach it in the same batch as the faulty
    # one (it holds pool_prefetch + 1 = 3 tasks), so they may be in its pending table when
    # it dies; only the faulty task may be charged for its death. The initializer imports
    # pool_helpers, so that no task waits for that import: the good tasks take
    # microseconds, as quick tasks do.
    with fiber.config.override(pool_max_task_retries=1), \
            ctx.Pool(1, initializer=ph.set_state, initargs=("warm",)) as pool:
        got = run_api(pool, api, items)
        if api == "map":
            ((kind, e),) = got  # the whole map fails
            assert kind == "err", summary(got)
            check_error(e, fault, stage, api)
        else:
            assert len(got) == ITEMS, summary(got)
            for i, (kind, value) in enumerate(got):
                if i == BAD:
                    assert kind == "err", summary(got)
                    check_error(value, fault, stage, api)
                else:  # only the faulty task failed
                    assert (kind, value) == ("ok", i * 10), summary(got)
        # the pool keeps working
        assert pool.apply_async(ph.square, (12,)).get(timeout=60) == 144
        assert pool.map_async(ph.square, range(6), 1).get(timeout=60) == [
            x * x for x in range(6)]


# -- retries -------------------------------------------------------------------------------


def die_once(marker: str, x):
    """Kills its worker the first time it runs (anywhere), then returns x."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return x
    os.close(fd)
    os._exit(ph.EXIT_CODE)


@pytest.mark.parametrize("api", ["apply_async", "map"])
def test_a_task_that_killed_its_worker_once_is_retried(ctx, tmp_path, api):
    marker = str(tmp_path / f"died-{api}")
    f = functools.partial(die_once, marker)
    with ctx.Pool(2) as pool:
        if api == "apply_async":
            assert pool.apply_async(f, ("again",)).get(timeout=60) == "again"
        else:
            assert pool.map_async(f, range(10), 1).get(timeout=60) == list(range(10))
        assert os.path.exists(marker)
        assert pool.apply_async(ph.square, (5,)).get(timeout=60) == 25


@pytest.mark.local_pids
def test_a_task_whose_worker_was_killed_from_outside_is_retried(ctx):
    with ctx.Pool(2) as pool:
        r = pool.apply_async(ph.sleep_then_pid, ("survivor", 1.0))

        def holders():
            # a worker can say hello and take the task before its start() has returned,
            # while its Process does not know its pid yet
            return [ws.process.pid for ws in pool._core.live_workers()
                    if ws.connected and ws.pending and ws.process.pid is not None]

        wait_until(lambda: len(holders()) == 1, 60, message="a worker holds the task")
        (victim,) = holders()
        os.kill(victim, signal.SIGKILL)
        value, pid = r.get(timeout=60)
        assert value == "survivor" and pid != victim


def test_retries_follow_pool_max_task_retries(ctx):
    with fiber.config.override(pool_max_task_retries=2), ctx.Pool(2) as pool:
        with pytest.raises(WorkerLostError) as info:
            pool.apply_async(ph.crash_target, (ph.RunFault("exit"),)).get(timeout=60)
        message = str(info.value)
        assert "killed its worker 3 times" in message and "pool_max_task_retries=2" in message
        assert [ln.split(":")[0].strip() for ln in message.splitlines()[1:]] == [
            "attempt 1", "attempt 2", "attempt 3"]
        assert pool.apply_async(ph.square, (3,)).get(timeout=60) == 9


def kill_at(deaths: str, index: int, x):
    """Returns x, except for ``index``, which kills its worker each time (after noting
    the death in the file ``deaths``)."""
    if x != index:
        return x
    with open(deaths, "a") as f:
        f.write(f"{os.getpid()}\n")
    os._exit(ph.EXIT_CODE)


def test_a_task_that_kills_every_worker_is_charged_with_each_death(ctx, tmp_path):
    """Its first victim held it among prefetched quick tasks (so that death was not
    charged to it then); every later one ran it alone. Each death counts: the error
    names as many attempts as there were deaths, and says that many (not "4 times"
    when 5 workers died)."""
    deaths = tmp_path / "deaths"
    f = functools.partial(kill_at, str(deaths), 150)
    with fiber.config.override(pool_max_task_retries=2), ctx.Pool(1) as pool:
        # f's tasks are measured quick: the worker then holds many at a time
        assert pool.map_async(f, range(100), 1).get(timeout=60) == list(range(100))
        with pytest.raises(WorkerLostError) as info:
            pool.map_async(f, range(100, 300), 1).get(timeout=120)
        died = deaths.read_text().split()
        message = str(info.value)
        attempts = [ln for ln in message.splitlines() if ln.strip().startswith("attempt ")]
        assert len(died) == len(attempts) == 3, message
        assert "map(kill_at) (task 50) killed its worker 3 times" in message, message
        assert pool.apply_async(ph.square, (4,)).get(timeout=60) == 16


@pytest.mark.local_pids
def test_work_held_by_a_worker_lost_after_close_is_still_done(ctx):
    """close() means: no new work, but what was submitted is done. A worker killed after
    close() (preempted node, OOM killer) must be replaced while work is left."""
    pool = ctx.Pool(1)
    r = pool.map_async(functools.partial(ph.sleep_return, seconds=0.3), range(6), 1)
    wait_until(lambda: any(ws.connected and ws.pending
                           for ws in pool._core.live_workers()), 60,
               message="the worker holds tasks")
    pool.close()
    (victim,) = [process.pid for process in recorded_jobs(pool)]
    os.kill(victim, signal.SIGKILL)
    try:
        assert r.get(timeout=15) == list(range(6))
    finally:
        pool.terminate()
        pool.join()


# -- an initializer that raises -----------------------------------------------------------


def test_initializer_that_raises_breaks_the_pool(ctx):
    with ctx.Pool(2, initializer=ph.init_raises, initargs=("init-boom-7",)) as pool:
        r = pool.apply_async(ph.square, (2,))
        m = pool.map_async(ph.square, range(8), 1)
        with pytest.raises(BrokenPoolError) as info:
            r.get(timeout=60)
        message = str(info.value)
        assert "Traceback" in message and "init_raises" in message, message
        assert "RuntimeError: init-boom-7" in message, message
        with pytest.raises(BrokenPoolError):
            m.get(timeout=10)
        with pytest.raises(BrokenPoolError):
            pool.apply_async(ph.square, (1,))
        it = None
        with pytest.raises(BrokenPoolError):
            it = pool.imap(ph.square, range(3))
        assert it is None
