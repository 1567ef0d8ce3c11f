"""Libraries that drive multiprocessing through a module object run with fiber instead.

stable-baselines3's SubprocVecEnv and gymnasium's AsyncVectorEnv look up ``Pipe``,
``Process``, ``Queue`` and ``get_context`` on the ``multiprocessing`` module they
imported; replacing that module object by ``fiber`` turns their environment workers into
fiber jobs. (AsyncVectorEnv's ``shared_memory=True`` maps one buffer into every worker's
address space, which jobs on other hosts cannot share: it is used with
``shared_memory=False``.)
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import fiber


def make_cartpole():
    return gym.make("CartPole-v1")


@pytest.mark.torch
def test_sb3_subproc_vec_env(monkeypatch):
    import stable_baselines3.common.vec_env.subproc_vec_env as sve

    monkeypatch.setattr(sve, "mp", fiber)
    env = sve.SubprocVecEnv([make_cartpole for _ in range(2)])
    try:
        assert all(isinstance(p, fiber.Process) for p in env.processes)
        obs = env.reset()
        assert obs.shape == (2, 4)
        for _ in range(30):
            actions = np.array([env.action_space.sample() for _ in range(2)])
            obs, rewards, dones, infos = env.step(actions)
            assert obs.shape == (2, 4) and rewards.shape == (2,)
        assert env.get_attr("spec")[0].id == "CartPole-v1"
    finally:
        env.close()
    assert all(p.exitcode is not None for p in env.processes)


@pytest.mark.parametrize("context", [None, "spawn"])
def test_gymnasium_async_vector_env(monkeypatch, context):
    import gymnasium.vector.async_vector_env as ave

    monkeypatch.setattr(ave, "multiprocessing", fiber)
    env = ave.AsyncVectorEnv([make_cartpole for _ in range(3)], shared_memory=False,
                             context=context)
    try:
        assert all(isinstance(p, fiber.Process) for p in env.processes)
        obs, info = env.reset(seed=1)
        assert obs.shape == (3, 4)
        for _ in range(30):
            obs, rewards, terminated, truncated, info = env.step(env.action_space.sample())
            assert obs.shape == (3, 4)
        ref = gym.vector.SyncVectorEnv([make_cartpole for _ in range(3)])
        assert np.array_equal(ref.reset(seed=1)[0], env.reset(seed=1)[0])
        ref.close()
    finally:
        env.close()


def test_worker_error_surfaces_through_gymnasium(monkeypatch):
    import gymnasium.vector.async_vector_env as ave

    monkeypatch.setattr(ave, "multiprocessing", fiber)
    env = ave.AsyncVectorEnv([make_cartpole], shared_memory=False)
    try:
        env.reset()
        with pytest.raises(AttributeError, match="no_such_method"):
            env.call("no_such_method")
    finally:
        env.close(terminate=True)
