"""Managers on the local backend alone: the class hierarchy, and a program that leaves its
managers to the interpreter's exit."""

from __future__ import annotations

import multiprocessing
import multiprocessing.managers

import pytest

import fiber
from fiber.managers import AsyncManager, BaseManager, SyncManager

import support


def test_async_manager_is_a_base_manager():
    assert issubclass(AsyncManager, BaseManager)
    assert issubclass(SyncManager, BaseManager)
    assert multiprocessing.managers.DictProxy._exposed_ == \
        fiber.managers.DictProxy._exposed_


@pytest.mark.parametrize("mode", ["global", "collected"])
def test_managers_left_to_exit_end_quietly(mode):
    """A program that never shuts its managers down exits with code 0 and a clean stderr:
    the servers are shut down (object jobs first) before fiber's exit function would
    terminate them, which left every object job printing 'parent ... is gone'."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    env = {k: v for k, v in support.subprocess_env().items() if not k.startswith("FIBER_")}
    cp = subprocess.run([sys.executable, os.path.join(here, "manager_exit_script.py"), mode],
                        capture_output=True, text=True, timeout=120, env=env, cwd=here)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.splitlines() == ["[1, 2, 3]", "[('a', 1)]"]
    assert cp.stderr == ""


def _tuple_address_uses(managers, authkey):
    """multiprocessing's common uses of a ``(host, 0)`` address: the address before
    start, a started manager's objects, and connect() at the started one's address."""
    mgr = managers.SyncManager(address=("127.0.0.1", 0), authkey=authkey)
    before = mgr.address
    mgr.start()
    try:
        other = managers.SyncManager(address=mgr.address, authkey=authkey)
        other.connect()
        return before, mgr.dict(a=1).copy(), other.list([2]).__len__()
    finally:
        mgr.shutdown()


def test_a_tuple_address_with_port_0_works_as_multiprocessings():
    expected = _tuple_address_uses(multiprocessing.managers, b"x")
    assert _tuple_address_uses(fiber.managers, None) == expected == \
        (("127.0.0.1", 0), {"a": 1}, 1)


def test_a_tuple_address_fiber_cannot_serve_at_says_what_to_pass():
    """A fixed port cannot be honoured (the server listens where its job runs, on a port
    fiber chooses), nor a (host, port) reached by connect(): each says to pass the
    started manager's .address, instead of serving elsewhere silently or raising
    AttributeError ('tuple' object has no attribute 'partition')."""
    fixed = BaseManager(address=("127.0.0.1", 50000))
    for call in (fixed.start, fixed.get_server, fixed.connect,
                 BaseManager(address=("127.0.0.1", 0)).connect):
        with pytest.raises(NotImplementedError, match=r"\.address \(a fiber address"):
            call()
    with pytest.raises(TypeError, match="address must be"):
        BaseManager(address=50000)  # type: ignore[arg-type]
