"""PPO on CartPole, its environments stepped in fiber processes.

stable-baselines3's ``SubprocVecEnv`` runs each environment in a process of its own and
talks to it over a ``Pipe``. It takes both from the module it imported as ``mp``; pointing
that name at fiber is the whole change (the original fiber's OpenAI-baselines demo made
the same one-line change, ``import fiber as mp``, inside baselines' copy of the file)::

    from stable_baselines3.common.vec_env import subproc_vec_env
    subproc_vec_env.mp = fiber    # SubprocVecEnv's Process and Pipe are now fiber's

Each environment is then a fiber job: a local process by default, a Slurm job with
``FIBER_BACKEND=slurm``, a pod with ``FIBER_BACKEND=kubernetes``. PPO itself (the policy,
the updates) runs in this process, as before.

    python examples/ppo_cartpole.py              # about a minute on a laptop
    python examples/ppo_cartpole.py --compare    # also with multiprocessing: same numbers?
    python examples/ppo_cartpole.py --envs 2 --timesteps 2048   # a few seconds

PPO on the CPU with a fixed seed is deterministic, and the environments do not care which
library started their process, so ``--compare`` trains twice, with multiprocessing then
with fiber, and checks that the episode returns, the evaluation and the final weights are
the same, bit for bit.

Needs fiber's ``examples`` extra (stable-baselines3, gymnasium, torch): ``pip install
'.[examples]'`` in fiber's checkout.
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import sys
import time
from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, subproc_vec_env

import fiber

ENV_ID = "CartPole-v1"
FIRST_LAST = 20  # episodes at each end of the learning curve that the report compares


@dataclass
class Outcome:
    """What one training run gives: enough to tell whether two runs are the same."""

    library: str
    episode_returns: List[float]  # of every training episode, in order
    evaluation: float  # mean return of the trained policy, acting greedily
    weights_sha256: str = ""
    rollout_steps_per_s: float = 0.0
    seconds: float = 0.0


class Progress(BaseCallback):
    """Records every finished training episode and the time spent collecting rollouts
    (the part that runs in the environment processes); prints a line now and then."""

    def __init__(self, print_every: int) -> None:
        super().__init__()
        self.print_every = print_every
        self.returns: List[float] = []
        self.rollout_s = 0.0
        self._rollout_t0 = 0.0
        self._rollouts = 0

    def _on_rollout_start(self) -> None:
        self._rollout_t0 = time.perf_counter()

    def _on_step(self) -> bool:
        for info in self.locals["infos"]:
            if "episode" in info:  # added by the Monitor wrapper when an episode ends
                self.returns.append(float(info["episode"]["r"]))
        return True

    def _on_rollout_end(self) -> None:
        self.rollout_s += time.perf_counter() - self._rollout_t0
        self._rollouts += 1
        if self.print_every and self._rollouts % self.print_every == 0:
            recent = self.returns[-20:]
            mean = f"{np.mean(recent):6.1f}" if recent else "     -"
            print(f"  {self.num_timesteps:>7} steps  mean return of the last 20 episodes "
                  f"{mean}  ({len(self.returns)} episodes)", flush=True)


def use(library: str) -> None:
    """Make SubprocVecEnv start its environment processes with ``library``."""
    if library == "fiber":
        subproc_vec_env.mp = fiber  # the one-line change
    else:
        subproc_vec_env.mp = multiprocessing  # what stable-baselines3 imported


def train(library: str, args: argparse.Namespace) -> Outcome:
    """Train PPO with ``args.envs`` environment processes started by ``library``."""
    use(library)
    t0 = time.perf_counter()
    envs = make_vec_env(ENV_ID, n_envs=args.envs, seed=args.seed, vec_env_cls=SubprocVecEnv)
    evaluation = make_vec_env(ENV_ID, n_envs=1, seed=args.seed + 10_000,
                              vec_env_cls=DummyVecEnv)
    try:
        # rl-baselines3-zoo's CartPole settings (one minibatch per epoch: 256 samples
        # with 8 environments), with a constant learning rate
        model = PPO("MlpPolicy", envs, n_steps=args.n_steps,
                    batch_size=args.n_steps * args.envs,
                    gae_lambda=0.8, gamma=0.98, n_epochs=args.epochs, ent_coef=0.0,
                    learning_rate=1e-3, clip_range=0.2, seed=args.seed, device="cpu")
        progress = Progress(print_every=args.print_every)
        model.learn(total_timesteps=args.timesteps, callback=progress)
        mean, _ = evaluate_policy(model, evaluation, n_eval_episodes=args.eval_episodes,
                                  deterministic=True)
    finally:
        envs.close()
        evaluation.close()
    weights = model.policy.parameters_to_vector().astype(np.float32).tobytes()
    return Outcome(library, progress.returns, float(mean), hashlib.sha256(weights).hexdigest(),
                   progress.num_timesteps / max(progress.rollout_s, 1e-9),
                   time.perf_counter() - t0)


def report(o: Outcome) -> None:
    """The learning curve's two ends, the trained policy's score and the speed."""
    first, last = o.episode_returns[:FIRST_LAST], o.episode_returns[-FIRST_LAST:]
    print(f"{o.library}: mean return of the first {len(first)} training episodes "
          f"{np.mean(first):.1f}, of the last {len(last)} {np.mean(last):.1f} "
          f"({len(o.episode_returns)} episodes); the trained policy scores "
          f"{o.evaluation:.1f} (CartPole-v1's maximum is 500); weights sha256 "
          f"{o.weights_sha256[:16]}; rollouts at {o.rollout_steps_per_s:,.0f} env steps/s; "
          f"{o.seconds:.1f} s in all", flush=True)


def same(a: Outcome, b: Outcome) -> bool:
    return (a.episode_returns == b.episode_returns and a.evaluation == b.evaluation
            and a.weights_sha256 == b.weights_sha256)


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--envs", type=int, default=8, help="environment processes (8)")
    p.add_argument("--timesteps", type=int, default=40_000,
                   help="environment steps to train for, all environments together (40000)")
    p.add_argument("--n-steps", type=int, default=32,
                   help="steps per environment in each rollout (32)")
    p.add_argument("--epochs", type=int, default=20, help="PPO epochs per rollout (20)")
    p.add_argument("--eval-episodes", type=int, default=10,
                   help="episodes of the trained policy's evaluation (10)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the environments and the networks (0)")
    p.add_argument("--with", dest="library", choices=("fiber", "multiprocessing"),
                   default="fiber", help="what starts the environment processes (fiber)")
    p.add_argument("--compare", action="store_true",
                   help="train with multiprocessing, then with fiber, and check that the "
                        "two runs give the same results")
    p.add_argument("--print-every", type=int, default=25,
                   help="print progress every N rollouts (25; 0: never)")
    args = p.parse_args(argv)
    for name in ("envs", "timesteps", "n_steps", "epochs", "eval_episodes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.envs * args.n_steps < 2:
        p.error("a rollout needs at least 2 steps (--envs times --n-steps)")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)  # a small network: threads only compete with the envs
    libraries = ["multiprocessing", "fiber"] if args.compare else [args.library]
    outcomes = []
    for library in libraries:
        where = f" ({fiber.get_context().get_start_method()} backend)" \
            if library == "fiber" else ""
        print(f"PPO on {ENV_ID}: {args.envs} environment processes started by {library}"
              f"{where}, {args.timesteps} steps", flush=True)
        outcomes.append(train(library, args))
        report(outcomes[-1])
    if args.compare:
        if not same(*outcomes):
            print("DIFFERENT: fiber and multiprocessing gave different results",
                  file=sys.stderr)
            return 1
        print("identical: the same episode returns, evaluation and weights with fiber as "
              "with multiprocessing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
