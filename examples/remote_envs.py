"""Eight CartPole environments, each in its own job, stepped in parallel.

An :class:`fiber.managers.AsyncManager` serves every environment in a job of its own, so
eight environments step on eight CPUs (or eight cluster nodes: ``FIBER_BACKEND=slurm``).
Each call returns a handle at once; ``handle.get()`` waits for that call's result, and
handles may be read in any order. A hand-written controller drives every cart for one
full episode (CartPole-v1 ends an episode after 500 steps; random actions drop the pole
after about 20).

    python examples/remote_envs.py                # needs: pip install gymnasium
    python examples/remote_envs.py --envs 2 --steps 50
"""

from __future__ import annotations

import argparse
import time
from typing import Any, List, Optional, Tuple

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
        self.returns: List[float] = []  # of the episodes finished so far
        self.episode_return = 0.0

    def reset(self) -> np.ndarray:
        obs, _ = self.env.reset(seed=self.seed)
        return obs

    def step(self, action: int) -> Tuple[np.ndarray, float, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_return += float(reward)
        done = terminated or truncated
        if done:
            self.returns.append(self.episode_return)
            self.episode_return = 0.0
            obs, _ = self.env.reset()
        return obs, float(reward), done, info

    def finished_returns(self) -> List[float]:
        return self.returns


def policy(obs: Any) -> int:
    """Push the cart the way the pole leans (a classic hand-written controller)."""
    angle, angular_velocity = obs[2], obs[3]
    return int(angle + 0.5 * angular_velocity > 0)


class RemoteEnvManager(fiber.managers.AsyncManager):
    pass


RemoteEnvManager.register("Env", CartPole)


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, default=8, help="environments, one job each (8)")
    p.add_argument("--steps", type=int, default=500, help="steps of every environment (500)")
    args = p.parse_args(argv)
    if args.envs < 1 or args.steps < 1:
        p.error("--envs and --steps must be at least 1")

    t0 = time.monotonic()
    manager = RemoteEnvManager(); manager.start()  # noqa: E702 - as in the README
    envs = [manager.Env(seed=i) for i in range(args.envs)]
    obs = [h.get() for h in [env.reset() for env in envs]]
    t_started = time.monotonic()
    for _ in range(args.steps):
        handles = [env.step(policy(o)) for env, o in zip(envs, obs)]  # all step at once
        obs = [h.get()[0] for h in handles]
    t_stepped = time.monotonic()
    returns = [r for h in [env.finished_returns() for env in envs] for r in h.get()]
    manager.shutdown()

    steps = args.envs * args.steps
    print(f"{args.envs} environments, each in its own "
          f"{fiber.get_context().get_start_method()} job, stepped {args.steps} times: "
          f"{steps} steps in {t_stepped - t_started:.2f} s ({steps / (t_stepped - t_started):,.0f} "
          f"steps/s; {t_started - t0:.2f} s to start the jobs)")
    if returns:
        print(f"{len(returns)} episodes finished, mean return {np.mean(returns):.1f} "
              f"(500 is CartPole-v1's maximum)")
    else:
        print(f"no episode finished yet: each lasts up to 500 steps (ran {args.steps})")


if __name__ == "__main__":
    main()
