"""``Value``/``Array`` as multiprocessing programs use them (issue 16).

- Made with ``lock=`` (True, a Lock, an RLock), they keep ``get_lock()`` (the same lock:
  held by the parent, a child cannot take it) and ``get_obj()`` after being passed to a
  child.
- An ``Array``'s ``get_obj()`` is a real ctypes array over memory that the processes of the
  creator's host share, a buffer numpy reads and writes, as with multiprocessing; on
  another host it is a handle (indexing only). gymnasium's
  ``AsyncVectorEnv(shared_memory=True)`` relies on it.
"""

from __future__ import annotations

import ctypes

import gymnasium as gym
import numpy as np
import pytest

import fiber
from fiber.sharedctypes import SharedArray
from fiber.testing.conformance.support import dropin_helpers as dh


@pytest.mark.parametrize("lock", ["True", "Lock", "RLock"])
def test_value_and_array_keep_their_lock_and_object_in_a_child(ctx, lock):
    made = {"True": lambda: True, "Lock": ctx.Lock, "RLock": ctx.RLock}[lock]
    value = ctx.Value("i", 1, lock=made())
    array = ctx.Array("d", [1.0, 2.0, 3.0], lock=made())
    q = ctx.Queue()
    with value.get_lock(), array.get_lock():
        p = ctx.Process(target=dh.check_shared, args=(value, array, q))
        p.start()
        busy, vtype, atype, buffer = q.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert busy == [True, True]  # the child's get_lock() is the parent's lock
    assert (vtype, atype) == ("Synchronized", "SynchronizedArray")
    assert value.value == 42 and array[:] == [7.0, 8.0, 9.0]  # written through get_obj()
    if ctx.get_start_method() in ("local", "netns"):  # jobs of this host map the memory
        assert buffer


def test_lock_of_a_value_passed_to_children_makes_increments_atomic(ctx):
    value = ctx.Value("i", 0, lock=ctx.Lock())
    procs = [ctx.Process(target=dh.add_under_lock, args=(value, 50)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert value.value == 150


def test_get_obj_of_an_array_is_a_buffer_in_its_creator():
    a = fiber.Array("d", 4)
    obj = a.get_obj()
    assert isinstance(obj, ctypes.Array) and len(obj) == 4
    np.frombuffer(obj, dtype=np.float64)[:] = [1, 2, 3, 4]
    assert a[:] == [1.0, 2.0, 3.0, 4.0]  # the served data is the same memory
    a[0] = 9.5
    assert obj[0] == 9.5
    assert fiber.Array("c", b"abc").get_obj().value == b"abc"
    # as multiprocessing's raw objects: no lock, no get_obj()
    assert not hasattr(fiber.RawArray("c", b"abc"), "get_obj")
    assert isinstance(fiber.Array("i", 0).get_obj(), ctypes.Array)  # empty, still mapped


def test_an_array_elsewhere_falls_back_to_its_handle():
    """What a process of another host gets (its memory cannot be mapped there): the
    unpickled handle whose locator names no memory of this host."""
    a = fiber.Array("i", [1, 2, 3])
    state = a.__getstate__()
    base, type_name, lock, client_lock, (length, item, locator) = state
    elsewhere = type(a).__new__(type(a))
    elsewhere.__setstate__((base, type_name, lock, client_lock,
                            (length, item, locator._replace(host=("another-boot", 1)))))
    view = elsewhere.get_obj()
    assert isinstance(view, SharedArray) and view[:] == [1, 2, 3]
    with pytest.raises(TypeError):
        np.frombuffer(view, dtype=np.int32)


def make_cartpole():
    return gym.make("CartPole-v1")


def test_gymnasium_async_vector_env_with_shared_memory(ctx, monkeypatch):
    import gymnasium.vector.async_vector_env as ave

    if ctx.get_start_method() not in ("local", "netns"):
        pytest.skip("shared memory needs the workers on the master's host")
    monkeypatch.setattr(ave, "multiprocessing", fiber)
    env = ave.AsyncVectorEnv([make_cartpole for _ in range(2)], shared_memory=True,
                             context=ctx.get_start_method())
    ref = gym.vector.SyncVectorEnv([make_cartpole for _ in range(2)])
    try:
        assert all(isinstance(p, fiber.Process) for p in env.processes)
        obs, _ = env.reset(seed=3)
        assert np.array_equal(obs, ref.reset(seed=3)[0])
        for _ in range(20):
            actions = env.action_space.sample()
            obs, *_ = env.step(actions)
            assert np.array_equal(obs, ref.step(actions)[0])
    finally:
        env.close()
        ref.close()


def test_copy_makes_a_shared_copy_of_a_ctypes_object():
    # multiprocessing.sharedctypes.copy; CPython's suite imports it with Value (issue 32)
    from fiber.sharedctypes import copy

    source, items = ctypes.c_double(2.5), (ctypes.c_int * 3)(1, 2, 3)
    value, array = copy(source), copy(items)
    source.value, items[0] = 0.0, 0
    assert (value.value, array[:]) == (2.5, [1, 2, 3])
    assert isinstance(array, SharedArray)
    with pytest.raises(TypeError, match="simple ctypes"):
        copy(ctypes.c_int * 2)  # a type, not an object


def test_lock_none_means_a_new_lock_as_in_multiprocessing():
    value, array = fiber.Value("i", 5, lock=None), fiber.Array("i", 3, lock=None)
    assert value.get_lock() is not None and array.get_lock() is not None
    with value.get_lock():
        value.value += 1
    assert value.value == 6
    assert not hasattr(fiber.Value("i", 5, lock=False), "get_lock")
