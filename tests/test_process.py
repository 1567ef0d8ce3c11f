"""Job-backed Process: multiprocessing semantics on the backend under test."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import helpers
import psutil
import pytest
from conftest import wait_until

import fiber
from fiber.backends import JobSpec, register_backend
from fiber.backends.local import LocalBackend
from fiber.errors import ProcessError


def test_start_join_exitcode_zero(ctx):
    p = ctx.Process(target=helpers.noop)
    assert p.exitcode is None and not p.is_alive()
    p.start()
    p.join(60)
    assert p.exitcode == 0 and not p.is_alive()
    assert "stopped exitcode=0" in repr(p)


@pytest.mark.parametrize("target,args,code", [
    (helpers.exit_with, (3,), 3),
    (helpers.hard_exit, (7,), 7),
    (helpers.exit_with, (None,), 0),
    (helpers.raise_value_error, ("boom",), 1),
    (helpers.kill_self, (signal.SIGKILL,), -signal.SIGKILL),
    (helpers.kill_self, (signal.SIGTERM,), -signal.SIGTERM),
])
def test_exit_codes_match_multiprocessing(ctx, target, args, code):
    p = ctx.Process(target=target, args=args)
    p.start()
    p.join(60)
    assert p.exitcode == code
    ref = multiprocessing.get_context("spawn").Process(target=target, args=args)
    ref.start()
    ref.join(60)
    assert ref.exitcode == code


def test_child_exception_traceback_reaches_stderr(ctx, capfd):
    p = ctx.Process(target=helpers.raise_value_error, args=("kaboom-123",))
    p.start()
    p.join(60)
    assert p.exitcode == 1
    err = capfd.readouterr().err
    assert "ValueError: kaboom-123" in err and "Traceback" in err


def test_kill_and_terminate(ctx):
    for method, sig in (("kill", signal.SIGKILL), ("terminate", signal.SIGTERM)):
        p = ctx.Process(target=helpers.sleep, args=(60,))
        p.start()
        wait_until(p.is_alive, 30, message="child running")
        time.sleep(0.3)
        getattr(p, method)()
        p.join(30)
        assert p.exitcode == -sig
        assert f"exitcode=-{signal.Signals(sig).name}" in repr(p)


def test_join_timeout_returns_while_running(ctx):
    p = ctx.Process(target=helpers.sleep, args=(30,))
    p.start()
    t = time.monotonic()
    p.join(0.3)
    assert 0.25 < time.monotonic() - t < 10
    assert p.is_alive() and p.exitcode is None
    p.kill()
    p.join(30)


def test_sentinel_works_with_multiprocessing_wait(ctx):
    slow = ctx.Process(target=helpers.sleep, args=(30,))
    fast = ctx.Process(target=helpers.noop)
    slow.start()
    fast.start()
    ready = multiprocessing.connection.wait([slow.sentinel, fast.sentinel], timeout=60)
    assert ready == [fast.sentinel]
    slow.kill()
    assert multiprocessing.connection.wait([slow.sentinel], timeout=30) == [slow.sentinel]
    fast.join(5)
    slow.join(5)


def test_attributes(ctx):
    p = ctx.Process(target=helpers.noop, name="worker-x", daemon=True)
    assert p.name == "worker-x" and p.daemon is True
    with pytest.raises(ValueError):
        _ = p.sentinel
    p.start()
    with pytest.raises(ProcessError):
        p.daemon = False
    assert isinstance(p.pid, int) and p.pid == p.ident
    p.join(60)
    q = ctx.Process(target=helpers.noop)
    assert q.name.startswith("Process-")
    assert fiber.current_process().name == "MainProcess"
    assert fiber.parent_process() is None
    assert isinstance(fiber.current_process().authkey, bytes)


def test_pids_unique(ctx):
    ps = [ctx.Process(target=helpers.noop) for _ in range(4)]
    for p in ps:
        p.start()
    assert len({p.pid for p in ps}) == 4
    for p in ps:
        p.join(60)


def test_child_sees_current_and_parent_process(ctx):
    q = ctx.Queue()
    p = ctx.Process(target=helpers.put_identity, args=(q,), name="kid")
    p.start()
    name, pid, parent_name, _ = q.get(timeout=60)
    p.join(60)
    assert name == "kid" and parent_name == "MainProcess"
    if ctx.get_start_method() == "local":
        assert pid == p.pid


def test_start_twice_close_and_state_errors(ctx):
    p = ctx.Process(target=helpers.sleep, args=(30,))
    with pytest.raises(ProcessError):
        p.join()
    p.start()
    with pytest.raises(ProcessError, match="twice"):
        p.start()
    with pytest.raises(ValueError, match="still running"):
        p.close()
    p.kill()
    p.join(30)
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.is_alive()
    p.close()  # idempotent


def test_unpicklable_argument_fails_at_start_and_submits_nothing(ctx):
    before = psutil.Process().children(recursive=True)
    p = ctx.Process(target=helpers.noop, args=(threading.Lock(),))
    with pytest.raises((TypeError, pickle.PicklingError)):
        p.start()
    assert psutil.Process().children(recursive=True) == before
    assert p not in fiber.active_children()


def test_lambda_and_closure_go_by_value(ctx):
    q = ctx.Queue()
    factor = 6
    p = ctx.Process(target=lambda: q.put(7 * factor))
    p.start()
    assert q.get(timeout=60) == 42
    p.join(60)


class Counter(fiber.Process):
    def __init__(self, q, n):
        super().__init__()
        self.q, self.n = q, n

    def run(self):
        self.q.put(sum(range(self.n)))


def test_process_subclass_with_run():
    q = fiber.Queue()
    p = Counter(q, 10)
    p.start()
    assert q.get(timeout=60) == 45
    p.join(60)
    assert p.exitcode == 0


def test_a_started_process_lets_go_of_its_arguments(ctx):
    """As multiprocessing: once started, the Process object no longer holds its target's
    arguments (a manager's object handed to a child was never freed while it lived)."""
    import gc
    import weakref

    payload = helpers.Payload()
    ref = weakref.ref(payload)
    p = ctx.Process(target=helpers.take, args=(payload,))
    p.start()
    del payload
    gc.collect()
    assert ref() is None
    p.join(60)
    assert p.exitcode == 0


def test_a_subclass_is_named_after_its_class(ctx):
    class Worker(fiber.Process):
        pass

    assert Worker().name.startswith("Worker-")
    assert ctx.Process(target=helpers.noop).name.startswith("Process-")
    assert multiprocessing.Process().name.startswith("Process-")


def test_a_child_ends_once_its_non_daemon_threads_have(ctx):
    """As multiprocessing: run() returning does not cut the child's other threads short."""
    q = ctx.Queue()
    p = ctx.Process(target=helpers.put_from_a_thread_later, args=(q, 0.5))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    assert q.get(timeout=10) == "late"


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


def test_active_children(ctx):
    p = ctx.Process(target=helpers.sleep, args=(30,))
    p.start()
    assert p in fiber.active_children()
    p.kill()
    p.join(30)
    assert p not in fiber.active_children()


def test_contexts_and_start_methods():
    assert fiber.get_context("spawn") is fiber.get_context()
    assert fiber.get_context("local").Process is fiber.get_context("local").Process
    methods = fiber.get_all_start_methods()
    assert "local" in methods and "spawn" in methods
    with pytest.raises(ValueError) as err:
        fiber.get_context("no-such-backend")
    assert "local" in str(err.value)
    # what PyTorch programs ask for: children that start clean, as fiber's always do
    assert fiber.get_context("forkserver") is fiber.get_context()
    assert "forkserver" in methods
    fiber.set_start_method("forkserver", force=True)
    with pytest.raises(ValueError, match="cannot be forked"):
        fiber.get_context("fork")
    with pytest.raises(ValueError, match="cannot be forked"):
        fiber.set_start_method("fork", force=True)


def test_unknown_backend_from_config_is_clear():
    with fiber.config.override(backend="nope"):
        p = fiber.Process(target=helpers.noop)
        with pytest.raises(ValueError, match="unknown fiber backend 'nope'.*local"):
            p.start()


class RecordingBackend(LocalBackend):
    name = "recording"
    specs: list = []

    def submit(self, specs):
        RecordingBackend.specs.extend(specs)
        return super().submit(specs)


@fiber.meta(cpu=2, memory=1024, gpu=1)
def annotated() -> None:
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


def _run_script(body: str, timeout: float = 120) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)],
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.path.dirname(__file__)})


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_no_orphans_when_parent_is_sigkilled(backend_name):
    parent = _run_script(f"""
        import fiber, helpers
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
    wait_until(lambda: _gone(child) and _gone(grandchild), 30, message="orphans to exit")
    assert time.monotonic() - t < 5.0


def test_daemon_children_end_with_parent_and_others_are_joined(backend_name):
    parent = _run_script(f"""
        import fiber, helpers
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
    wait_until(lambda: _gone(d) and _gone(n), 10, message="children to exit")


class NeverStarts(LocalBackend):
    """A real local job that never runs fiber's bootstrap (a cluster that lost it)."""

    name = "never-starts"

    def submit(self, specs):
        return super().submit([JobSpec(command=(sys.executable, "-c", "import time; "
                                                "time.sleep(60)"), env=s.env)
                               for s in specs])


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
        [sys.executable, "-c", "import fiber, helpers\n"
         "p = fiber.Process(target=helpers.noop); p.start(); p.join(60)"],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "FIBER_DEBUG": "1", "PYTHONPATH": os.path.dirname(__file__)})
    assert "started Process-1 as local job" in out.stderr, out.stderr
    secret_free = os.environ.get("FIBER_SECRET", "no-secret-set")
    assert secret_free not in out.stderr


class FarAway(LocalBackend):
    """A backend whose jobs would run on another network (they never start here)."""

    name = "far-away"

    def listen_host(self):
        return "10.9.8.7"


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


def test_parent_sentinel_is_not_ready_while_the_parent_lives(ctx):
    q = ctx.Queue()
    p = ctx.Process(target=helpers.report_parent_sentinel, args=(q,))
    p.start()
    assert q.get(timeout=60) == ([], True, True)
    p.join(60)
    assert p.exitcode == 0


def test_parent_sentinel_is_ready_once_the_parent_is_killed(ctx):
    # The grandchild's lifeline ends it once its parent is gone, but only after the
    # sentinel is readable and a thread waiting on it has had time to report.
    q = ctx.Queue()
    child = ctx.Process(target=helpers.start_sentinel_watcher, args=(q,))
    child.start()
    msg = q.get(timeout=60)
    assert msg[0] == "watching", msg
    _, pid, alive, ready = msg
    assert alive is True and ready == []
    child.kill()
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    assert q.get(timeout=30) == ("gone", True, False)
    if ctx.get_start_method() in ("local", "netns"):
        wait_until(lambda: _gone(pid), 30, message="the grandchild to end")
