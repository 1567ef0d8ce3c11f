"""multiprocessing's process behaviours that programs rely on (issue 16).

- A grandchild whose parent is terminated keeps running and sees it: ``parent_process()``
  turns dead, its ``join(timeout)`` returns; yet every job still ends with the program's
  main process (fiber.process._lineage).
- ``os.kill(p.pid, sig)`` reaches the process running the target (local backends).
- ``get_context("spawn").get_start_method() == "spawn"``; ``"fork"`` means the default
  backend, with a warning, instead of making the program unusable.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from typing import Tuple

import pytest

import fiber
from fiber.backends import get_backend
from fiber.testing.conformance.support import dropin_helpers as dh
from fiber.testing.conformance.support.waiting import gone, wait_until

pytestmark = pytest.mark.timeout(180)


def test_a_grandchild_outlives_its_terminated_parent_and_sees_it(ctx):
    q, back = ctx.Queue(), ctx.Queue()
    intermediate = ctx.Process(target=dh.start_then_sleep, args=(q, back))
    intermediate.start()
    got = {}
    while len(got) < 3:  # ("intermediate", pid), ("alive", ...), ("joined early", ...)
        msg = q.get(timeout=60)
        got[msg[0]] = msg[1:]
    assert got["alive"][1] is True
    assert got["joined early"] == (True,)  # join(timeout) returned while the parent lived
    intermediate.terminate()
    intermediate.join(60)
    assert intermediate.exitcode == -signal.SIGTERM
    # the grandchild noticed: is_alive() False, join() returned, sentinel readable ...
    assert q.get(timeout=60) == ("gone", False, True)
    # ... and it is still running (it answers), as a multiprocessing grandchild would be
    back.put("ping")
    assert q.get(timeout=60) == ("pong", "ping")


@pytest.mark.local_pids
def test_os_kill_of_pid_reaches_the_target_process(ctx):
    q = ctx.Queue()
    p = ctx.Process(target=dh.wait_for_signal, args=(q, signal.SIGUSR1))
    p.start()
    kind, pid = q.get(timeout=60)
    assert kind == "ready" and p.pid == pid  # p.pid is the OS pid of the target's process
    os.kill(p.pid, signal.SIGUSR1)
    assert q.get(timeout=60) == ("signalled", True)
    p.join(60)
    assert p.exitcode == 0


def test_the_whole_program_ends_with_its_main_process():
    """A grandchild whose parent was terminated still ends when the main process does
    (local backend: the jobs are followed by OS pid)."""
    script = textwrap.dedent("""
        import sys, fiber
        from fiber.testing.conformance.support import dropin_helpers as dh
        fiber.init(backend="local")
        q = fiber.Queue()
        p = fiber.Process(target=dh.start_grandchild_then_sleep, args=(q,))
        p.start()
        grandchild = q.get(timeout=60)
        p.terminate(); p.join(60)
        print(p.exitcode, grandchild, flush=True)
        sys.stdin.readline()   # the test has seen the grandchild outlive its parent
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [os.path.dirname(__file__), *sys.path])})
    try:
        assert proc.stdout is not None and proc.stdin is not None
        exitcode, grandchild = map(int, proc.stdout.readline().split())
        assert exitcode == -signal.SIGTERM
        time.sleep(1.0)  # longer than a grandchild ended with its parent would have lived
        assert not gone(grandchild)
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.wait(60) == 0
        wait_until(lambda: gone(grandchild), 30, message="the grandchild to end with the program")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _job_and_child(proc: subprocess.Popen) -> Tuple[str, int]:
    """The job id the program prints, and its child's pid (the child's prefixed line),
    within 60 s; else a failure that shows what the program and the job said."""
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout],
                     daemon=True).start()
    job_id, child, seen = None, None, []
    deadline = time.monotonic() + 60
    while (job_id is None or child is None) and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            break
        seen.append(line)
        found = re.fullmatch(r"job (\S+)\n", line)
        if found:
            job_id = found.group(1)
        found = re.fullmatch(r"\(Process-\d+@[^)]*\) (\d+)\n", line)
        if found:
            child = int(found.group(1))
    if job_id is not None and child is not None:
        return job_id, child
    proc.kill()
    _, err = proc.communicate(timeout=30)
    log = get_backend("local").read_logs(job_id) if job_id else "(no job id)"
    raise AssertionError(f"stdout: {seen!r}\nthe program's stderr:\n{err}\n"
                         f"the job's log:\n{log}")


def test_a_child_sees_the_program_end_before_it_ends(tmp_path):
    """When the main process is killed, its child's ``parent_process()`` turns dead and
    a thread waiting in ``join()`` runs (it writes a file) before the child ends."""
    out = tmp_path / "seen"
    script = textwrap.dedent(f"""
        import sys
        import fiber
        from fiber.testing.conformance.support import dropin_helpers as dh
        fiber.init(backend="local")
        p = fiber.Process(target=dh.report_parent_end, args=({str(out)!r},))
        p.start()
        # one write: with PYTHONUNBUFFERED (as in CI), print() writes its words one by
        # one, and the child's forwarded line could land between them
        sys.stdout.write(f"job {{p.job_id}}\\n")
        sys.stdout.flush()
        p.join()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                [os.path.dirname(__file__), *sys.path])})
    try:
        job_id, child = _job_and_child(proc)
        proc.kill()
        proc.wait(30)
        wait_until(lambda: gone(child), 30, message="the child to end with the program")
        assert out.read_text() == "gone alive=False"
        # what it said as it ended could not reach the killed master: its log has it
        assert "is gone (its Unix socket ended); job" in get_backend("local").read_logs(job_id)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


_START_METHOD_STEPS = textwrap.dedent("""
    import json, sys
    m = __import__(sys.argv[1])
    said = []
    def step(fn, *args, **kw):
        try:
            fn(*args, **kw)
            said.append("ok")
        except Exception as e:
            said.append(f"{type(e).__name__}: {e}")
    said.append(m.get_start_method(allow_none=True))
    step(m.set_start_method, "spawn")
    said.append(m.get_start_method(allow_none=True))
    step(m.set_start_method, "spawn")  # a second time: refused
    step(m.set_start_method, "forkserver", force=True)
    said.append(m.get_start_method())
    step(m.set_start_method, None, force=True)
    said.append(m.get_start_method(allow_none=True))
    step(m.set_start_method, "spawn")  # forgotten: may be set again
    print(json.dumps(said))
""")


def test_start_method_set_once_as_multiprocessing_sets_it():
    """None before any is set (``allow_none``), a second ``set_start_method`` refused
    without ``force``, forgotten with ``None, force=True``: step by step as the standard
    library, each in a fresh interpreter."""
    said = {}
    for module in ("multiprocessing", "fiber"):
        cp = subprocess.run([sys.executable, "-c", _START_METHOD_STEPS, module],
                            capture_output=True, text=True, timeout=60)
        assert cp.returncode == 0, cp.stderr
        said[module] = cp.stdout.strip()
    assert said["fiber"] == said["multiprocessing"]
    assert "RuntimeError: context has already been set" in said["fiber"]


def test_spawn_context_names_itself_and_fork_means_the_default_backend(ctx):
    spawn = fiber.get_context("spawn")
    assert spawn.get_start_method() == "spawn"
    assert fiber.get_context("forkserver").get_start_method() == "forkserver"
    assert fiber.get_context().get_start_method() == fiber.get_config().backend
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fork = fiber.get_context("fork")
        fiber.set_start_method("fork")
    assert fork.get_start_method() == "fork"
    assert [w.category for w in caught] == [RuntimeWarning, RuntimeWarning]
    assert all("does not inherit" in str(w.message) for w in caught)
    try:  # the default backend, under that name, as the children say too
        assert fiber.get_start_method() == "fork" and fiber.get_context() is fork
        out = fiber.SimpleQueue()
        p = fiber.Process(target=dh.put_start_method, args=(out,))
        p.start()
        assert out.get() == "fork"
        p.join(60)
    finally:
        fiber.set_start_method(None, force=True)
    assert fiber.get_start_method() == fiber.get_config().backend
    p = spawn.Process(target=dh.put_start_method, args=(out,))  # its class's method
    p.start()
    assert out.get() == "spawn"
    p.join(60)
    with pytest.raises(ValueError, match="unknown fiber backend 'forky'"):
        fiber.get_context("forky")
    # the program goes on: a "fork" context starts fiber jobs
    q = fork.Queue()
    p = fork.Process(target=dh.grandchild_pid_then_sleep, args=(q,))
    p.start()
    assert isinstance(q.get(timeout=60), int)
    p.kill()
    p.join(60)


def test_set_executable_takes_bytes_and_paths_and_preload_checks_names(ctx):
    # as multiprocessing's (CPython's test_set_executable, test_context_check_module_types)
    import pathlib

    try:  # set_executable sets the python config key
        for path in (sys.executable.encode(), pathlib.Path(sys.executable)):
            fiber.set_executable(path)
            assert fiber.get_config().python == sys.executable
            p = ctx.Process(target=dh.triple, args=(1,))
            p.start()
            p.join(60)
            assert p.exitcode == 0
        with pytest.raises(TypeError):
            fiber.set_executable(3)  # type: ignore[arg-type]
    finally:
        fiber.init(python=None)  # back to the environment's, or the default
    fiber.set_forkserver_preload(["json"])
    with pytest.raises(TypeError, match="module_names must be a list of strings"):
        fiber.get_context("forkserver").set_forkserver_preload([1, 2, 3])  # type: ignore[list-item]


def test_a_child_inherits_the_level_the_program_gave_the_logger(ctx):
    # as a spawn child of multiprocessing (CPython's _TestLogging.test_level); starting a
    # job no longer resets the level to the config's either (issue 32)
    import logging

    logger, root = fiber.get_logger(), logging.getLogger()
    before = (logger.level, root.level)
    q = ctx.Queue()
    try:
        for own, root_level, expected in ((32, before[1], 32), (logging.NOTSET, 37, 37)):
            logger.setLevel(own)
            root.setLevel(root_level)
            p = ctx.Process(target=dh.logger_level, args=(q,))
            p.start()
            assert q.get(timeout=60) == expected
            p.join(60)
            assert logger.level == own
    finally:
        logger.setLevel(before[0])
        root.setLevel(before[1])


def _misuses(mp, Process):
    """What each misuse of a process object that multiprocessing checks raises: the
    exception's type as ``except`` clauses see it (AssertionError? ValueError?) and its
    message."""
    def outcome(call):
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the exception is what is compared
            return (isinstance(e, AssertionError), isinstance(e, ValueError), str(e))
        return None

    seen = {}
    unstarted = Process(target=time.sleep, args=(0,))
    seen["join unstarted"] = outcome(unstarted.join)
    seen["join current"] = outcome(mp.current_process().join)
    running = Process(target=time.sleep, args=(30,))
    running.start()
    try:
        seen["close running"] = outcome(running.close)
        seen["start running"] = outcome(running.start)
        seen["daemon running"] = outcome(lambda: setattr(running, "daemon", True))
    finally:
        running.kill()
        running.join(30)
    seen["start ended"] = outcome(running.start)
    running.close()
    seen["start closed"] = outcome(running.start)
    seen["join closed"] = outcome(running.join)
    return seen


def test_process_misuse_raises_what_multiprocessing_raises(ctx):
    """multiprocessing asserts on misuse (start twice, join unstarted or not a child, set
    daemon once started):
    code catching AssertionError keeps working with fiber, whose exception is also a
    fiber.ProcessError; a closed or running process raises ValueError in both."""
    import multiprocessing

    expected = _misuses(multiprocessing, multiprocessing.Process)
    assert expected["start ended"] == (True, False, "cannot start a process twice")
    assert _misuses(fiber, ctx.Process) == expected
    with pytest.raises(fiber.ProcessError):
        ctx.Process(target=time.sleep, args=(0,)).join()
