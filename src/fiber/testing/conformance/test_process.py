"""Job-backed Process: multiprocessing semantics on the backend under test."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import threading
import time

import psutil
import pytest

import fiber
from fiber.backends import get_backend
from fiber.errors import ProcessError

from .support import helpers
from .support.waiting import gone, wait_until


def test_start_join_exitcode_zero(ctx):
    p = ctx.Process(target=helpers.noop)
    assert p.exitcode is None and not p.is_alive()
    p.start()
    p.join(60)
    assert p.exitcode == 0 and not p.is_alive()
    assert "stopped exitcode=0" in repr(p)


def test_a_jobs_atexit_handlers_run_at_its_end(ctx, capfd):
    """As a spawn child of multiprocessing: what the program registered with ``atexit``
    runs when the job's ``run()`` and threads are done (a handler that flushes a log,
    saves coverage data), its output forwarded and its queue's item delivered."""
    q = ctx.Queue()
    p = ctx.Process(target=helpers.put_at_exit, args=(q,))
    p.start()
    assert q.get(timeout=60) == "put at exit"
    p.join(60)
    assert p.exitcode == 0
    out: list = []
    wait_until(lambda: out.append(capfd.readouterr().out) or "said at exit" in "".join(out),
               timeout=30)


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
    if get_backend(ctx.get_start_method()).jobs_share_host:  # a pid of this machine
        assert pid == p.pid


def test_the_standard_librarys_parent_process_answers_in_a_job(ctx):
    """Code in a job that asks the standard library (``multiprocessing.
    parent_process()``, a context's, ``multiprocessing.process``'s: a library, a test)
    gets the job's parent, as a spawned child does, not None; in a child the job forks
    with the standard library, the standard library's own answer (the job) stands."""
    q = ctx.Queue()
    p = ctx.Process(target=helpers.report_stdlib_parent, args=(q,))
    p.start()
    answers, job_pid, forked = q.get(timeout=120)
    p.join(60)
    me = (os.getpid(), "MainProcess", True)
    assert answers == [me, me, me], answers
    assert forked == job_pid


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
    # as multiprocessing's repr of a closed process (no pid, no exit code)
    assert repr(p) == f"<{type(p).__name__} name={p.name!r} parent={os.getpid()} closed>"
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


def test_active_children(ctx):
    p = ctx.Process(target=helpers.sleep, args=(30,))
    p.start()
    assert p in fiber.active_children()
    p.kill()
    p.join(30)
    assert p not in fiber.active_children()


def test_parent_sentinel_is_not_ready_while_the_parent_lives(ctx):
    q = ctx.Queue()
    p = ctx.Process(target=helpers.report_parent_sentinel, args=(q,))
    p.start()
    assert q.get(timeout=60) == ([], True, True)
    p.join(60)
    assert p.exitcode == 0


def test_parent_sentinel_is_ready_once_the_parent_is_killed(ctx):
    # The grandchild outlives its parent (as with multiprocessing): its sentinel turns
    # readable, a thread waiting on it reports, and then the grandchild ends by itself.
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
    if get_backend(ctx.get_start_method()).jobs_share_host:  # its pid is of this machine
        wait_until(lambda: gone(pid), 30, message="the grandchild to end")
