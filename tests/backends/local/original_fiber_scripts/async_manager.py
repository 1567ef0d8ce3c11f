"""Environments served by managers, stepped in lock-step, in the style of the original
fiber's examples/async_manager.py (written here): a SyncManager and an AsyncManager
subclass each register a gymnasium environment through functools.partial, one manager
per environment, all left running until the interpreter exits."""

import time
from functools import partial

import gymnasium as gym

from fiber.managers import AsyncManager, SyncManager

ENVS = 2
STEPS = 30


class EnvSyncManager(SyncManager):
    pass


class EnvAsyncManager(AsyncManager):
    pass


def run(manager_class, asynchronous):
    make = partial(gym.make, "CartPole-v1")
    sample_env = make()
    manager_class.register("CartPoleEnv", make)
    managers = [manager_class() for _ in range(ENVS)]
    [m.start() for m in managers]
    envs = [m.CartPoleEnv() for m in managers]
    [env.reset() for env in envs]
    for _ in range(STEPS):
        actions = [sample_env.action_space.sample() for _ in envs]
        results = [env.step(a) for env, a in zip(envs, actions)]
        if asynchronous:
            results = [handle.get() for handle in results]
        for env, (_obs, _reward, terminated, truncated, _info) in zip(envs, results):
            if terminated or truncated:
                env.reset()


def main():
    start = time.time()
    run(EnvSyncManager, False)
    print(f"Sync manager took {time.time() - start:.2f}s")
    start = time.time()
    run(EnvAsyncManager, True)
    print(f"Async manager took {time.time() - start:.2f}s")


if __name__ == "__main__":
    main()
