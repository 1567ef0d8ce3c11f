"""fiber.Pool on the local backend alone: the time a thread waiting for results spends
polling (measured on this machine), a program that ends with its pool open, an exception


class of the main script, and the resources of each worker's job."""

from __future__ import annotations

import functools
import os
import select
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import pytest

import fiber
from fiber.backends import register_backend
from fiber.backends.local import LocalBackend
from fiber.pool._pool import core_of
from fiber.testing.conformance.support import pool_helpers as ph
from fiber.testing.conformance.support.waiting import recorded_jobs, wait_until
from fiber.transport.server import Server

import support


def _empty_wait_polled(server: Server, budget: float) -> float:
    """Time spent polling in a 1 s wait on ``server`` that nothing ends, with a poll
    ``budget`` (wall time in the poll loop, as :func:`_wait_polled`)."""
    start = fiber.transport.cpus.polled_seconds()
    assert not server.wait_serving(lambda: False, 1.0, lambda left: False, lambda: budget)
    return fiber.transport.cpus.polled_seconds() - start


def live(pool):
    """The pool's workers that have not been lost."""
    return pool._core.live_workers()


class PoolRecordingBackend(LocalBackend):
    name = "pool-recording"
    specs: list = []

    def submit(self, specs):
        PoolRecordingBackend.specs.extend(specs)
        return super().submit(specs)


def connected(pool) -> int:
    return sum(1 for ws in live(pool) if ws.connected)


def test_a_wait_for_quick_tasks_polls_while_they_run():
    """The budget of a wait is ``spin_us``, plus the running time of the function last
    submitted when its tasks are quick (up to 2 ms): the wait then ends awake."""
    from fiber.pool._service import PoolService

    service = PoolService(b"pool-test", 2, None, 3, lambda ws, expected: None, spin=0.0002)
    assert service.spin_budget() == pytest.approx(0.0002)  # nothing measured yet
    service.last_fid = 7
    service.task_seconds[7] = 0.0011
    assert service.spin_budget() == pytest.approx(0.0013)
    service.task_seconds[7] = 0.05  # slow: polling through it would only burn a CPU
    assert service.spin_budget() == pytest.approx(0.0002)
    service.spin = 0.0  # spin_us=0: never polls
    service.task_seconds[7] = 0.0011
    assert service.spin_budget() == 0.0


def test_an_exception_class_of_the_main_script_is_raised_as_itself():
    """An exception class defined in the main script (pickled by value) comes back as
    that class, so that ``except EnvCrashed`` works as with multiprocessing; before, a
    plain-pickle check made it a RemoteError."""
    code = textwrap.dedent("""
        import fiber, fiber.futures

        class EnvCrashed(Exception):
            pass

        def rollout(seed):
            raise EnvCrashed(seed)

        if __name__ == "__main__":
            with fiber.Pool(1) as pool:
                try:
                    pool.apply(rollout, (7,))
                except EnvCrashed as e:
                    print("pool", e.args, type(e.__cause__).__name__)
                errors = []
                pool.apply_async(rollout, (8,), error_callback=errors.append).wait(60)
                print("callback", type(errors[0]) is EnvCrashed)
            with fiber.futures.Executor(1) as ex:
                print("executor", type(ex.submit(rollout, 3).exception(timeout=60)) is EnvCrashed)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:3] == [
        "pool (7,) RemoteTraceback", "callback True", "executor True"], out.stdout


def test_a_program_that_ends_with_its_pool_open_exits_quietly():
    """Many programs never close their pool: at exit its workers end and nothing is
    printed (the pool's thread waited on the sentinels that a finalizer run at exit had
    closed, and the exit handler joined processes that thread had closed: tracebacks in
    most runs)."""
    code = textwrap.dedent("""
        import fiber

        def square(x):
            return x * x

        if __name__ == "__main__":
            pool = fiber.Pool(3)
            print(sum(pool.map(square, range(10))))
    """)
    for _ in range(4):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120)
        assert (out.returncode, out.stdout, out.stderr) == (0, "285\n", "")


def test_a_program_that_ends_with_tasks_running_starts_no_worker_at_exit(tmp_path):
    """At exit the program ends its daemonic children, a pool's workers among them. The
    pool took those for lost workers and started replacements (9 workers had started
    for a Pool(8), 65 for a Pool(64)), which the exit then waited for: a program that
    ended with 512 workers blocked in their tasks waited for ever."""
    code = textwrap.dedent("""
        import os, sys, time
        import fiber

        def mark(folder):
            open(os.path.join(folder, str(os.getpid())), "w").close()

        def task(x):
            time.sleep(60)
            return x

        if __name__ == "__main__":
            folder, n = sys.argv[1], int(sys.argv[2])
            pool = fiber.Pool(n, initializer=mark, initargs=(folder,))
            pool.map_async(task, range(n), chunksize=1)
            while len(os.listdir(folder)) < n:
                time.sleep(0.01)
            time.sleep(0.5)
            print("leaving")
    """)
    for n in (8, 64):
        folder = tmp_path / str(n)
        folder.mkdir()
        out = subprocess.run([sys.executable, "-c", code, str(folder), str(n)],
                             capture_output=True, text=True, timeout=120)
        assert (out.returncode, out.stdout, out.stderr) == (0, "leaving\n", "")
        assert len(os.listdir(folder)) == n, f"workers started for a Pool({n})"


def test_pool_resources_reach_each_workers_job_spec():
    register_backend("pool-recording", PoolRecordingBackend)
    PoolRecordingBackend.specs.clear()
    with fiber.get_context("pool-recording").Pool(3, cpu=2, memory=256) as pool:
        assert pool.apply_async(ph.square, (4,)).get(timeout=60) == 16
        wait_until(lambda: connected(pool) == 3, 60, message="three workers connected")
    specs = [s for s in PoolRecordingBackend.specs if s.name.startswith("PoolWorker-")]
    assert len(specs) >= 3
    for spec in specs:
        assert (spec.resources.cpu, spec.resources.memory_mb) == (2, 256), spec.resources


def test_a_wait_polls_for_its_budget_in_all_however_often_it_is_woken(monkeypatch):
    """Messages that wake a waiting thread without ending its wait (another thread's
    results, say) do not make it poll again: the budget bounds a whole wait."""
    monkeypatch.setattr(fiber.transport.cpus, "spare_cpu", lambda: True)
    server = Server("127.0.0.1", name="fiber-test-server")
    stop = threading.Event()

    def nudge() -> None:
        while not stop.is_set():
            server.nudge()
            time.sleep(0.002)

    nudger = threading.Thread(target=nudge)
    nudger.start()
    try:
        polled = _empty_wait_polled(server, 0.05)
    finally:
        stop.set()
        nudger.join()
        server.close()
    assert 0.04 < polled < 0.3, polled


def test_a_wait_stops_polling_once_no_cpu_is_spare(monkeypatch):
    """While the host's runnable tasks leave no CPU to spare, a polling thread yields
    its CPU, and soon stops polling for the rest of its wait."""
    monkeypatch.setattr(fiber.transport.cpus, "spare_cpu", lambda: False)
    server = Server("127.0.0.1", name="fiber-test-server")
    try:
        polled = _empty_wait_polled(server, 0.5)
    finally:
        server.close()
    assert polled < 0.05, polled


def test_an_ended_pool_writes_nothing_to_the_pipes_made_after_it(ctx):
    """Once a pool's maintainer has ended and closed its wake pipe, waking it (terminate
    again, a future's cancel) must not write to the numbers that pipe had: a later pipe of
    the program takes them (a stdlib ThreadPool read a stray b"x" as a message length, and
    hung)."""
    pool = ctx.Pool(1)
    assert pool.map(ph.square, [3]) == [9]
    pool.terminate()
    pool.join()
    core = core_of(pool)
    wait_until(lambda: not core.maintainer.is_alive(), 60, message="the maintainer to end")
    pipes = [os.pipe() for _ in range(16)]  # the lowest free numbers: the wake pipe's too
    try:
        pool.terminate()
        core.wake()
        readable = select.select([r for r, _ in pipes], [], [], 0.2)[0]
        assert readable == [], "a pool that has ended wrote to a later pipe"
    finally:
        for r, w in pipes:
            os.close(r)
            os.close(w)


def test_a_pool_collected_while_the_runtime_starts_its_hub_is_terminated_not_hung() -> None:
    """Garbage collection runs a dropped pool's finalizer wherever it strikes: in ci22
    (Python 3.13) inside ``_runtime.hub()``, which holds the runtime's lock, and the
    finalizer's termination asked for that lock again: the test waited for ever. The
    finalizer is called here as garbage collection called it there, under that lock:
    it must return at once and the pool still end (on a thread of its own; elsewhere it
    ends before the collection returns, see test_pool_lifecycle)."""
    from fiber._process_state import here
    from fiber.pool._poolcore import TERMINATE, terminate_collected

    pool = fiber.Pool(1)
    assert pool.apply(abs, (-1,)) == 1
    core = core_of(pool)
    returned = threading.Event()

    def collected_in_hub() -> None:
        with here.transport.hub_lock:  # where the collection struck
            terminate_collected(core)
        returned.set()

    threading.Thread(target=collected_in_hub, daemon=True).start()
    assert returned.wait(15), "the finalizer waited for the lock it was called under"
    wait_until(lambda: core.state == TERMINATE and not core.maintainer.is_alive(), 60,
               message="the collected pool terminated")


def test_a_callback_that_ran_is_not_kept_by_the_pool():
    """What a callback holds is freed once it ran, while the pool lives on (joblib's
    Parallel, which owns the pool of fiber's joblib backend, is held by its callbacks)."""
    class Owner:
        def took(self, value):
            self.value = value

    with fiber.Pool(1) as pool:
        owner = Owner()
        held = weakref.ref(owner)
        pool.apply_async(ph.square, (3,), callback=owner.took).get(timeout=60)
        assert owner.value == 9
        del owner  # the callback thread lets go of it just after get() returned
        wait_until(lambda: held() is None, timeout=10, message="the callback's owner freed")


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_closed_by_the_program_after_its_end_is_still_replaced():
    """The program joins and closes a worker's process that ended (one it found in
    ``active_children``, say) before the pool's maintainer saw the end: the maintainer
    watches its own copy of the sentinel, so the end is still seen, the worker replaced,
    and ``join`` returns. (It watched the process's own: the closed descriptor left its
    selector without a word, and either ``join`` waited for that job for ever or the
    maintainer died registering the next job's sentinel, which took the same number;
    reading the closed process's exit code killed it too.)"""
    with fiber.Pool(2) as pool:
        assert pool.map(ph.square, range(4)) == [0, 1, 4, 9]
        core = core_of(pool)
        victim = recorded_jobs(pool)[0]
        with core.hub.lock:  # the maintainer, once woken, waits for the lock
            core.wake()
            time.sleep(0.2)
            os.kill(victim.pid, 9)
            victim.join(30)
            assert victim.exitcode == -9
            victim.close()
        wait_until(lambda: len(core.procs) == 2 and victim not in
                   [job.process for job in core.procs.values()], 30, message="a replacement")
        assert pool.map(ph.square, range(4)) == [0, 1, 4, 9]
        assert core.maintainer.is_alive()  # (it died of a KeyError: a new sentinel took
        pool.close()                       # the closed one's number, still registered)
        assert support.joins_within(pool, 60), "join() waited for a job that had ended"


def test_a_maintainer_that_fails_breaks_the_pool_loudly(monkeypatch, capfd):
    """An error the pool's maintainer did not foresee (here: closing an ended job's
    sentinel fails) breaks the pool: what waits raises BrokenPoolError, and close() and
    join() return. (It killed the maintainer thread: no worker was replaced again, and a
    map that needed one waited for ever.)"""
    import errno

    from fiber.errors import BrokenPoolError
    from fiber.pool import _poolcore

    real, calls = _poolcore.release_ended, []

    def failing(proc, owner=False):
        calls.append(proc)
        if len(calls) == 1:
            raise OSError(errno.EBADF, "Bad file descriptor")
        return real(proc, owner=owner)

    monkeypatch.setattr(_poolcore, "release_ended", failing)
    pool = fiber.Pool(2, maxtasksperchild=1)  # each worker ends after its task
    # tasks of 0.3 s: the maintainer reaps the first ended job while the map still runs
    # (quick tasks could all end, on replacements started as each worker's connection
    # closed, before the maintainer reached its first job's end: seen on a loaded VM)
    task = functools.partial(ph.sleep_return, seconds=0.3)
    try:
        with pytest.raises(BrokenPoolError, match="maintainer"):
            pool.map_async(task, range(8), 1).get(60)
        with pytest.raises(BrokenPoolError):
            pool.apply(ph.square, (3,))
        pool.close()
        assert support.joins_within(pool, 60)
    finally:
        pool.terminate()
    assert "the pool is broken" in capfd.readouterr().err


def test_a_callback_that_exits_leaves_the_callback_thread_running():
    """``sys.exit()`` in a callback (a SystemExit, not an Exception) is printed, and the
    pool's later callbacks still run. (It ended the callback thread without a word, and
    every later result with a callback, or a future, never became ready.)"""
    def exit_on_big(value: int) -> None:
        if value > 10:
            sys.exit("enough")

    with fiber.Pool(2) as pool:
        pool.apply_async(ph.square, (5,), callback=exit_on_big).wait(30)
        seen: list = []
        later = pool.apply_async(ph.square, (2,), callback=seen.append)
        assert later.get(30) == 4
        assert seen == [4]


def _init_marks_then_sleeps(folder: str) -> None:
    open(os.path.join(folder, str(os.getpid())), "w").close()
    time.sleep(1000)


def test_terminate_while_a_job_still_forks_its_workers_returns(tmp_path):
    """A job of 8 workers terminated as its first worker starts (the others not forked
    yet): the signal the job passes on reaches the workers it forks after it too. They
    used to sit in their initializer, and terminate() waited for the job for ever."""
    pool = fiber.Pool(8, workers_per_job=8, initializer=_init_marks_then_sleeps,
                      initargs=(str(tmp_path),))
    wait_until(lambda: os.listdir(tmp_path), 60, interval=0.0005,
               message="a worker in its initializer")
    done = threading.Thread(target=pool.terminate, daemon=True)
    done.start()
    done.join(30)
    assert not done.is_alive(), "terminate() hung"


def test_a_pool_collected_in_a_thread_that_holds_the_hub_lock_is_ended_elsewhere():
    """Garbage collection may end a dropped pool in a thread that holds the hub's lock
    (a collection starts at any allocation). Terminating there joined the pool's
    maintainer, which waited for that lock: the thread hung for ever (CI's 3.9 stage
    saw every pool's maintainer stuck so). It is ended on a thread of its own now."""
    import gc

    pools = [fiber.Pool(1)]
    assert pools[0].map(ph.square, [3]) == [9]
    hub, ref = core_of(pools[0]).hub, weakref.ref(pools[0])
    collected = threading.Event()

    def drop_it_holding_the_lock() -> None:
        with hub.lock:
            pools.clear()
            gc.collect()
        collected.set()

    threading.Thread(target=drop_it_holding_the_lock, daemon=True).start()
    assert collected.wait(30), "a pool collected under the hub's lock hung its thread"
    assert ref() is None
    with fiber.Pool(1) as pool:  # the hub serves on
        assert pool.map(ph.square, [4]) == [16]
