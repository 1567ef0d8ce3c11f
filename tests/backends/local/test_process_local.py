"""Job-backed processes on the local backend alone: what only processes of this machine show
(orphans and daemons when a parent script is killed or ends, descriptors of collected
processes, debug logging of a script), contexts and start methods, ``@fiber.meta``, and
backends written for a test (one that records specs, one whose jobs never connect, one
whose jobs would run on another network)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import fiber
from fiber.backends import JobSpec, register_backend
from fiber.backends.local import LocalBackend
from fiber.errors import ProcessError
from fiber.testing.conformance.support import helpers
from fiber.testing.conformance.support.waiting import gone, wait_until

import support


class Counter(fiber.Process):
    def __init__(self, q, n):
        super().__init__()
        self.q, self.n = q, n

    def run(self):
        self.q.put(sum(range(self.n)))


class RecordingBackend(LocalBackend):
    name = "recording"
    specs: list = []

    def submit(self, specs):
        RecordingBackend.specs.extend(specs)
        return super().submit(specs)


@fiber.meta(cpu=2, memory=1024, gpu=1)
def annotated() -> None:
    pass


def _run_script(body: str, timeout: float = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)],
                            stdout=subprocess.PIPE, text=True,
                            env=support.subprocess_env())


class NeverStarts(LocalBackend):
    """A real local job that never runs fiber's bootstrap (a cluster that lost it)."""

    name = "never-starts"

    def submit(self, specs):
        return super().submit([JobSpec(command=(sys.executable, "-c", "import time; "
                                                "time.sleep(60)"), env=s.env)
                               for s in specs])


class FarAway(LocalBackend):
    """A backend whose jobs would run on another network (they never start here)."""

    name = "far-away"

    def listen_host(self):
        return "10.9.8.7"


def test_process_subclass_with_run():
    q = fiber.Queue()
    p = Counter(q, 10)
    p.start()
    assert q.get(timeout=60) == 45
    p.join(60)
    assert p.exitcode == 0


def test_started_processes_keep_no_descriptor_once_collected():
    """Each started process has a sentinel (a pipe); it is closed when the Process object
    is collected, as multiprocessing does, not only by close()."""
    import gc

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    ctx = fiber.get_context("local")
    ctx.Process(target=helpers.noop).start()  # the first start opens what stays open
    gc.collect()
    before = open_fds()
    for _ in range(30):
        p = ctx.Process(target=helpers.noop)
        p.start()
        p.join(60)
        assert p.exitcode == 0
        del p
    gc.collect()
    assert open_fds() - before < 10


def test_contexts_and_start_methods():
    # the default backend under multiprocessing's names for its classes
    spawn = fiber.get_context("spawn")
    assert type(spawn).__name__ == "SpawnContext" and spawn.get_context() is spawn
    assert spawn.Process.__name__ == "SpawnProcess"
    assert issubclass(spawn.Process, fiber.get_context().Process)
    assert fiber.get_context("local").Process is fiber.get_context("local").Process
    methods = fiber.get_all_start_methods()
    assert "local" in methods and "spawn" in methods
    with pytest.raises(ValueError) as err:
        fiber.get_context("no-such-backend")
    assert "local" in str(err.value)
    with pytest.raises(ValueError, match="concrete context"):
        spawn.set_start_method("local")
    # what PyTorch programs ask for: children that start clean, as fiber's always do
    assert fiber.get_context("forkserver").Process.__name__ == "ForkServerProcess"
    assert "forkserver" in methods
    try:
        fiber.set_start_method("forkserver", force=True)
        assert fiber.get_start_method() == "forkserver"
        assert fiber.get_context() is fiber.get_context("forkserver")
    finally:
        fiber.set_start_method(None, force=True)
    assert fiber.get_start_method() == fiber.get_config().backend
    # "fork": the default backend too, with a warning (backends/local/test_dropin_process.py)


def test_contexts_are_the_standard_librarys_kind():
    """A library that takes a context object checks for multiprocessing's ``BaseContext``
    (PyTorch's DataLoader: backends/local/test_torch_dataloader.py); its error classes are
    fiber's, which subclass multiprocessing's."""
    import multiprocessing.context

    from fiber.context import DefaultContext

    for ctx in (fiber.get_context(), fiber.get_context("local"), fiber.get_context("spawn"),
                fiber.get_context("forkserver"), DefaultContext()):
        assert isinstance(ctx, multiprocessing.context.BaseContext), ctx
        assert ctx.ProcessError is fiber.ProcessError
        assert ctx.TimeoutError is fiber.TimeoutError
        assert ctx.AuthenticationError is fiber.AuthenticationError
        assert ctx.BufferTooShort is fiber.BufferTooShort
        assert issubclass(ctx.TimeoutError, multiprocessing.TimeoutError)
        assert issubclass(ctx.BufferTooShort, multiprocessing.BufferTooShort)
        with pytest.raises(AttributeError, match="own serializer"):
            ctx.reducer = ctx.reducer
        assert isinstance(ctx.Queue(), fiber.queues.Queue)
        assert issubclass(ctx.Process, fiber.Process)


def test_unknown_backend_from_config_is_clear():
    """Refused where it is set, not at the first ``start()`` (the config's tests check
    the environment's and ``.fiberconfig``'s)."""
    with pytest.raises(ValueError, match="unknown backend 'nope'; known backends: .*local"):
        with fiber.config.override(backend="nope"):
            pass


def test_meta_resources_reach_the_job_spec(monkeypatch):
    # gpu=1 on a local-backed job needs a GPU of this host: one, as the environment says
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    register_backend("recording", RecordingBackend)
    RecordingBackend.specs.clear()
    p = fiber.get_context("recording").Process(target=annotated)
    p.start()
    p.join(60)
    assert p.exitcode == 0
    spec: JobSpec = RecordingBackend.specs[-1]
    assert (spec.resources.cpu, spec.resources.memory_mb, spec.resources.gpu) == (2, 1024, 1)
    assert not hasattr(annotated.__wrapped__, "resources")  # the function is untouched
    assert annotated() is None
    secret = fiber.current_process().authkey.hex()
    assert all(secret not in word for word in spec.command)


def test_meta_rejects_bad_values():
    with pytest.raises(ValueError):
        fiber.meta(cpu=-1)
    with pytest.raises(TypeError):
        fiber.meta(memory="lots")


def test_no_orphans_when_parent_is_sigkilled(backend_name):
    parent = _run_script(f"""
        import fiber
        from fiber.testing.conformance.support import helpers
        fiber.init(backend={backend_name!r})
        q = fiber.Queue()
        p = fiber.Process(target=helpers.spawn_child_and_report, args=(q, False))
        p.start()
        print(p.pid, q.get(timeout=60), flush=True)
        p.join()
    """)
    assert parent.stdout is not None
    child, grandchild = map(int, parent.stdout.readline().split())
    parent.kill()
    parent.wait(30)
    t = time.monotonic()
    wait_until(lambda: gone(child) and gone(grandchild), 30, message="orphans to exit")
    assert time.monotonic() - t < 5.0


def test_daemon_children_end_with_parent_and_others_are_joined(backend_name):
    parent = _run_script(f"""
        import fiber
        from fiber.testing.conformance.support import helpers
        fiber.init(backend={backend_name!r})
        d = fiber.Process(target=helpers.sleep, args=(120,), daemon=True)
        n = fiber.Process(target=helpers.sleep, args=(1.5,))
        d.start(); n.start()
        print(d.pid, n.pid, flush=True)
    """)
    assert parent.stdout is not None
    d, n = map(int, parent.stdout.readline().split())
    t = time.monotonic()
    assert parent.wait(60) == 0
    assert time.monotonic() - t >= 1.0  # the non-daemonic child was joined
    wait_until(lambda: gone(d) and gone(n), 10, message="children to exit")


def test_join_keeps_its_timeout_when_a_grandchild_holds_the_output_open():
    """Once the job has ended, join waits for its last output, but no longer than the
    caller's timeout: a grandchild that keeps the job's output open made every join(0)
    or join(0.2) of that ended job take 2 s."""
    q = fiber.SimpleQueue()
    p = fiber.Process(target=helpers.leave_a_grandchild_on_my_output, args=(q,))
    p.start()
    grandchild = q.get()
    try:
        wait_until(lambda: not p.is_alive(), 60, message="the child to end")
        for timeout in (0, 0.2):
            t = time.monotonic()
            p.join(timeout)
            assert time.monotonic() - t < 1.0, timeout
        assert p.exitcode == 0
    finally:
        os.kill(grandchild, signal.SIGKILL)


def test_job_that_never_connects_is_cancelled_after_startup_timeout(capfd):
    register_backend("never-starts", NeverStarts)
    with fiber.config.override(startup_timeout=1.0):
        p = fiber.get_context("never-starts").Process(target=helpers.noop)
        p.start()
        p.join(30)
    assert p.exitcode == -signal.SIGKILL
    assert "did not start within" in capfd.readouterr().err


def test_debug_logging_goes_to_stderr():
    out = subprocess.run(
        [sys.executable, "-c",
         "import fiber\nfrom fiber.testing.conformance.support import helpers\n"
         "p = fiber.Process(target=helpers.noop); p.start(); p.join(60)"],
        capture_output=True, text=True, timeout=120,
        env=support.subprocess_env(FIBER_DEBUG="1"))
    assert "started Process-1 as local job" in out.stderr, out.stderr
    secret_free = os.environ.get("FIBER_SECRET", "no-secret-set")
    assert secret_free not in out.stderr


def test_a_job_that_could_not_reach_this_process_is_refused_clearly():
    register_backend("far-away", FarAway)
    p = fiber.get_context("far-away").Process(target=helpers.noop)
    with pytest.raises(ProcessError, match="listen_host"):
        p.start()


def test_a_collected_process_releases_its_jobs_record_in_the_backend():
    """A program that starts processes without end (a pool with maxtasksperchild=1) must not
    grow the backend's bookkeeping: a finished process, once collected, releases its job."""
    import gc

    from fiber.backends import get_backend

    backend = get_backend("local")
    assert isinstance(backend, LocalBackend)
    ctx = fiber.get_context("local")
    seen = set()
    for _ in range(10):
        p = ctx.Process(target=time.sleep, args=(0,))
        p.start()
        p.join(60)
        assert p.exitcode == 0
        seen.add(p._job.handle.job_id)
    del p

    def released() -> bool:
        gc.collect()
        ctx.Process(target=time.sleep, args=(0,)).start()  # a start releases what was collected
        return not seen & set(backend._procs)

    wait_until(released, 30, message="the backend still keeps finished, collected jobs")


def _a_short_job_is_seen_ending() -> None:
    """A job that sleeps 0.2 s: its join returns well before its 60 s, with exit code 0
    (a watcher that no longer sees ends leaves join waiting its whole time)."""
    p = fiber.Process(target=time.sleep, args=(0.2,))
    p.start()
    t0 = time.monotonic()
    p.join(60)
    waited = time.monotonic() - t0
    assert p.exitcode == 0
    assert waited < 30, f"join waited {waited:.0f} s: nothing saw the job end"


def test_a_failed_status_query_does_not_end_the_watch_of_local_jobs(monkeypatch):
    """The local backend's watcher asks the backend how each ended job ended; one query
    that fails (any error) is asked again, as a cluster watcher asks again after a flaky
    command. (It killed the watcher: no local job's end was seen any more, and every
    join, the pool's and the exit handler's too, waited for ever.)"""
    import threading

    real, failed = LocalBackend.status, []

    def flaky(self, handles):
        if threading.current_thread().name.startswith("fiber-watch") and not failed:
            failed.append(True)
            raise OSError("a failure of the status query")
        return real(self, handles)

    monkeypatch.setattr(LocalBackend, "status", flaky)
    for _ in range(2):  # the job whose query failed, then the next: each seen
        _a_short_job_is_seen_ending()
    assert failed


@pytest.mark.parametrize("fork_server", [True, False])
def test_close_of_a_child_that_exited_before_its_end_was_seen(monkeypatch, fork_server):
    """As multiprocessing's close polls the process, fiber's asks the backend: a child
    that has exited is closed even if the job watcher has not seen its end yet, nor the
    fork server reported it (close said "still running" about 1 time in 5 just after
    the child's exit). Here the watcher is held, and the fork server's report late."""
    import threading

    from fiber.backends.local._forkserver import ForkedJob

    real_status, real_end, go_on = LocalBackend.status, ForkedJob.end, threading.Event()

    def held(self, handles):
        if threading.current_thread().name.startswith("fiber-watch"):
            go_on.wait(30)
        return real_status(self, handles)

    def late(self, *args, **kwargs):
        time.sleep(0.3)
        return real_end(self, *args, **kwargs)

    monkeypatch.setattr(LocalBackend, "status", held)
    monkeypatch.setattr(ForkedJob, "end", late)
    with fiber.config.override(local_fork_server=fork_server):
        p = fiber.get_context("local").Process(target=helpers.noop)
        p.start()
    try:
        wait_until(lambda: gone(p.pid), 60, message="the child to exit")
        p.close()
    finally:
        go_on.set()


def test_a_subprocess_reaped_before_its_pidfd_is_opened_is_still_seen_ending(monkeypatch):
    """A subprocess job that ended and was reaped (another thread's ``is_alive`` polls
    it) before the watcher opened its pidfd: its end is read in the next round. (The
    watcher stood /dev/null in for the pidfd, which epoll refuses with EPERM: it died,
    and every join waited for ever; CI saw it once in 30 minutes of tests.)"""
    import threading

    real, refused = os.pidfd_open, []

    def reaped(pid, *args):
        if not refused:
            refused.append(pid)
            raise ProcessLookupError(pid)
        return real(pid, *args)

    monkeypatch.setattr(os, "pidfd_open", reaped)
    with fiber.config.override(local_fork_server=False):
        for _ in range(2):  # the job whose pidfd was refused, then the next: each seen
            _a_short_job_is_seen_ending()
    assert refused
    assert any(t.name == "fiber-watch-local" for t in threading.enumerate())
