"""Eight CartPole environments, each in its own job, stepped in parallel.

An :class:`fiber.managers.AsyncManager` serves every environment in a job of its own, so
eight environments step on eight CPUs (or eight cluster nodes: ``FIBER_BACKEND=slurm``).
Each call returns a handle at once; ``handle.get()`` waits for that call's result, and
handles may be read in any order.

    python examples/remote_envs.py            # needs: pip install gymnasium
"""

from __future__ import annotations

import time
from typing import Any, Tuple

import gymnasium as gym
import numpy as np

import fiber
import fiber.managers


class CartPole:
    """A CartPole whose ``reset`` returns the observation only and whose ``step``
    starts a new episode by itself when one ends (as vectorized environments do)."""

    def __init__(self, seed: int = 0) -> None:
        self.env = gym.make("CartPole-v1")
        self.seed = seed
        self.episodes = 0
        self.total = 0.0
        self.episode_return = 0.0

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self.seed)
        return obs

    def step(self, action: int) -> Tuple[np.ndarray, float, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        done = terminated or truncated
        if done:
            self.episodes += 1
            self.total += self.episode_return
            self.episode_return = 0.0
            obs, _ = self.env.reset()
        return obs, float(reward), done, info

    def stats(self) -> Tuple[int, float]:
        return self.episodes, self.total


def make_env() -> CartPole:
    return CartPole()


def policy(obs: Any) -> int:
    """Push the cart the way the pole leans (a classic hand-written controller)."""
    angle, angular_velocity = obs[2], obs[3]
    return int(angle + 0.5 * angular_velocity > 0)


class RemoteEnvManager(fiber.managers.AsyncManager):
    pass


RemoteEnvManager.register("Env", make_env)


def main() -> None:
    t0 = time.monotonic()
    manager = RemoteEnvManager(); manager.start()  # noqa: E702 - as in the README
    envs = [manager.Env() for _ in range(8)]
    obs = [h.get() for h in [env.reset() for env in envs]]
    for _ in range(100):
        handles = [env.step(policy(o)) for env, o in zip(envs, obs)]
        obs = [h.get()[0] for h in handles]
    stats = [h.get() for h in [env.stats() for env in envs]]
    print(f"8 environments x 100 steps in {time.monotonic() - t0:.2f} s "
          f"(including starting 8 jobs); episodes finished: {sum(e for e, _ in stats)}")
    manager.shutdown()


if __name__ == "__main__":
    main()
