"""This process's state in one place (``fiber._process_state``): a forked child gets its
own id, runs every registered hook in order, and finds the state fiber keeps per process
made anew, even the locks another thread held at the fork; a test puts state back
with one call. Real forks (``os.fork``), no stand-ins."""

from __future__ import annotations

import os
import threading
import warnings
from typing import Callable, List

import pytest

import fiber
from fiber import _log
from fiber._core import _runtime
from fiber._process_state import ProcessState, here
from fiber.config import _compat

# forking a process that has threads is what these tests do on purpose (Python 3.12 and
# later warn that it may deadlock the child: the hooks under test are what prevents it)
pytestmark = pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")


def in_child(check: Callable[[], bool]) -> bool:
    """Whether ``check()`` holds in a child forked now (it exits 0 if so; 1 if not; 2 if
    it raised; a child that hangs is killed by the alarm it sets itself)."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            import signal
            signal.alarm(20)
            code = 0 if check() else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), f"the child ended by signal {os.WTERMSIG(status)}"
    code = os.WEXITSTATUS(status)
    assert code != 2, "the check raised in the child"
    return code == 0


def test_pid_is_the_childs_own_after_a_fork():
    assert here.pid == os.getpid()
    forks = here.forks
    assert in_child(lambda: here.pid == os.getpid() and here.forks == forks + 1)
    assert here.pid == os.getpid() and here.forks == forks  # the parent's is unchanged


def test_hooks_run_in_order_and_one_failing_does_not_stop_the_others(capfd):
    state = ProcessState()
    ran: List[str] = []
    state.after_fork_in_child(lambda: ran.append("first"))

    @state.after_fork_in_child
    def fails() -> None:
        raise RuntimeError("broken hook")

    state.after_fork_in_child(lambda: ran.append("third"))
    state.forked()  # as os.register_at_fork calls it in a child
    assert ran == ["first", "third"]
    assert state.forks == 1
    err = capfd.readouterr().err
    assert "fails failed" in err and "RuntimeError: broken hook" in err


def test_locks_another_thread_held_at_the_fork_are_free_in_the_child():
    """Without the hooks the child would wait for ever on a lock copied held (the
    child's alarm then kills it, and the test fails)."""
    held = [here.transport.hub_lock, here.api.log_lock, here.api.manager_channels_lock,
            here.api.queue_lease_lock]
    taken, release = threading.Event(), threading.Event()

    def holder() -> None:
        for lock in held:
            lock.acquire()
        taken.set()
        release.wait()
        for lock in held:
            lock.release()

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert taken.wait(10)

        def all_free() -> bool:
            return all(lock.acquire(timeout=5) for lock in [
                here.transport.hub_lock, here.api.log_lock, here.api.manager_channels_lock,
                here.api.queue_lease_lock])

        assert in_child(all_free)
    finally:
        release.set()
        t.join()


def test_a_forked_child_starts_its_own_hub():
    q = fiber.SimpleQueue()  # the parent's hub is up
    parent_hub = _runtime.hub_if_started()
    assert parent_hub is not None

    def own_hub() -> bool:
        if _runtime.hub_if_started() is not None:
            return False  # the parent's, whose thread did not follow
        hub = _runtime.hub()
        return hub is not parent_hub and hub.alive and hub.address != parent_hub.address

    assert in_child(own_hub)
    del q


def test_reset_for_tests_forgets_remembered_warnings():
    _log.warn("a warning this test makes")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _compat.warn_once("some-key", "once")
    assert _log.recent_warnings()[0] > 0 and "some-key" in here.api.compat_warned
    here.reset_for_tests()
    assert _log.recent_warnings() == (0, [])
    assert "some-key" not in here.api.compat_warned
