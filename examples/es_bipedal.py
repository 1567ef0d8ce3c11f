"""Evolution strategies (OpenAI-ES) on BipedalWalker-v3, the population evaluated by a
fiber.Pool.

    python examples/es_bipedal.py                      # ~1-2 min on a laptop (local backend)
    python examples/es_bipedal.py --iterations 3 --pairs 4 --max-steps 100 --noise-mb 8
    FIBER_BACKEND=slurm python examples/es_bipedal.py  # the same program on a cluster

As in Salimans et al. (2017): one large table of Gaussian noise, shared by every worker
(handed to the pool once as ``initargs``: fiber sends it once per host, and the workers of
a host map one copy of it); a perturbation is an offset into the table, so a task is the
policy and a few numbers, and the master rebuilds each perturbation from its offset;
antithetic pairs (theta + sigma*eps and theta - sigma*eps, on the same episode seed);
rank-based fitness shaping (centred ranks in [-0.5, 0.5]); Adam on the estimated
gradient, with weight decay. The policy is a small tanh network. Results depend on the
seeds only, not on which worker ran what.

``import multiprocessing`` in place of fiber gives the same results for the same seeds
(``benchmarks/es.py`` runs both).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import gymnasium
import numpy as np

import fiber

ENV_ID = "BipedalWalker-v3"
OBS, ACT = 24, 4  # BipedalWalker's observation and action sizes

# -- in each worker ------------------------------------------------------------------------

_noise: Optional[np.ndarray] = None


def init_worker(noise: np.ndarray) -> None:
    """Pool initializer: keep the shared noise table."""
    global _noise
    _noise = noise


def check_environment() -> None:
    """Make the environment once in the master: a missing Box2D fails here, and the
    modules it loads are loaded before the workers start (fiber's local fork server
    pre-imports what the master has imported, as a forked worker inherits it)."""
    try:
        env = gymnasium.make(ENV_ID)
    except gymnasium.error.DependencyNotInstalled as e:
        raise SystemExit(f"{ENV_ID} needs Box2D and pygame: pip install box2d pygame-ce "
                         f"(or fiber's examples extra). gymnasium says: {e}") from None
    shapes = env.observation_space.shape, env.action_space.shape
    env.close()
    if shapes != ((OBS,), (ACT,)):
        raise RuntimeError(f"{ENV_ID} has observation and action shapes {shapes}, "
                           f"this policy expects {((OBS,), (ACT,))}")


def policy_size(hidden: int) -> int:
    return OBS * hidden + hidden + hidden * ACT + ACT


def act(theta: np.ndarray, obs: np.ndarray, hidden: int) -> np.ndarray:
    """The policy: obs -> tanh(W1 obs + b1) -> tanh(W2 h + b2), weights packed in theta."""
    w1 = theta[:OBS * hidden].reshape(hidden, OBS)
    at = OBS * hidden
    b1 = theta[at:at + hidden]
    at += hidden
    w2 = theta[at:at + hidden * ACT].reshape(ACT, hidden)
    b2 = theta[at + hidden * ACT:]
    return np.tanh(w2 @ np.tanh(w1 @ obs + b1) + b2)


def episode(theta: np.ndarray, hidden: int, seed: int, max_steps: int) -> Tuple[float, int]:
    """Total reward and steps of one episode of at most ``max_steps`` steps.

    A new environment each time (making one costs about what ``reset`` does): a Box2D
    world that ran other episodes gives slightly different results, and the results
    must not depend on which worker ran which episode before."""
    env = gymnasium.make(ENV_ID)
    try:
        obs, _ = env.reset(seed=seed)
        total, steps = 0.0, 0
        while steps < max_steps:
            obs, reward, terminated, truncated, _ = env.step(act(theta, obs, hidden))
            total += float(reward)
            steps += 1
            if terminated or truncated:
                break
        return total, steps
    finally:
        env.close()


def evaluate_pair(task: Tuple[np.ndarray, int, float, int, int, int]
                  ) -> Tuple[float, float, int]:
    """One antithetic pair: rewards of theta + sigma*eps and theta - sigma*eps (eps read
    from the shared table at ``offset``), on the same episode seed; and the steps run."""
    theta, offset, sigma, hidden, seed, max_steps = task
    assert _noise is not None, "init_worker was not run"
    eps = _noise[offset:offset + theta.size]
    plus, steps_plus = episode(theta + sigma * eps, hidden, seed, max_steps)
    minus, steps_minus = episode(theta - sigma * eps, hidden, seed, max_steps)
    return plus, minus, steps_plus + steps_minus


def evaluate_policy(task: Tuple[np.ndarray, int, int, int]) -> float:
    """The reward of the unperturbed policy on one episode seed."""
    theta, hidden, seed, max_steps = task
    return episode(theta, hidden, seed, max_steps)[0]


# -- in the master ---------------------------------------------------------------------------


def make_noise(megabytes: float, seed: int) -> np.ndarray:
    """The shared noise table: float32 standard normals."""
    count = int(megabytes * (1 << 20)) // 4
    return np.random.default_rng(seed).standard_normal(count, dtype=np.float32)


def centered_ranks(x: np.ndarray) -> np.ndarray:
    """Rank-based fitness shaping: ranks mapped linearly onto [-0.5, 0.5]."""
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[x.ravel().argsort()] = np.arange(x.size)
    return (ranks / max(x.size - 1, 1) - 0.5).reshape(x.shape)


class Adam:
    """Adam ascent on a flat parameter vector."""

    def __init__(self, size: int, lr: float, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-8) -> None:
        self.lr, self.beta1, self.beta2, self.eps = lr, beta1, beta2, eps
        self.m = np.zeros(size)
        self.v = np.zeros(size)
        self.t = 0

    def step(self, grad: np.ndarray) -> np.ndarray:
        """The change to add to the parameters for ``grad`` (to be ascended)."""
        self.t += 1
        self.m = self.beta1 * self.m + (1 - self.beta1) * grad
        self.v = self.beta2 * self.v + (1 - self.beta2) * grad * grad
        m_hat = self.m / (1 - self.beta1 ** self.t)
        v_hat = self.v / (1 - self.beta2 ** self.t)
        return self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def es_step(pool: Any, noise: np.ndarray, theta: np.ndarray, adam: Adam,
            rng: np.random.Generator, args: argparse.Namespace) -> Dict[str, Any]:
    """One ES iteration: evaluate ``args.pairs`` antithetic pairs, update ``theta`` in
    place; returns what happened."""
    start = time.perf_counter()
    offsets = rng.integers(0, noise.size - theta.size + 1, size=args.pairs)
    seed = int(rng.integers(2**31))
    tasks = [(theta, int(o), args.sigma, args.hidden, seed, args.max_steps) for o in offsets]
    results = pool.map(evaluate_pair, tasks, chunksize=1)
    rewards = np.array([(plus, minus) for plus, minus, _ in results])
    steps = sum(s for _, _, s in results)
    shaped = centered_ranks(rewards)
    weights = shaped[:, 0] - shaped[:, 1]
    grad = sum(w * noise[o:o + theta.size] for w, o in zip(weights, offsets))
    grad = grad / (2 * args.pairs * args.sigma) - args.l2 * theta
    theta += adam.step(grad)
    seconds = time.perf_counter() - start
    return {"reward_mean": float(rewards.mean()), "reward_max": float(rewards.max()),
            "steps": int(steps), "seconds": seconds, "steps_per_s": steps / seconds}


def policy_reward(pool: Any, theta: np.ndarray, args: argparse.Namespace) -> float:
    """Mean reward of ``theta`` itself on ``args.eval_episodes`` fixed episode seeds."""
    tasks = [(theta, args.hidden, 10_000 + k, args.max_steps)
             for k in range(args.eval_episodes)]
    return float(np.mean(pool.map(evaluate_policy, tasks, chunksize=1)))


def initial_policy(args: argparse.Namespace) -> np.ndarray:
    rng = np.random.default_rng(args.seed + 1)
    return rng.standard_normal(policy_size(args.hidden)) * args.init_scale


def train(pool: Any, noise: np.ndarray, theta: np.ndarray, args: argparse.Namespace,
          report: Callable[[int, Dict[str, Any]], None] = lambda i, s: None
          ) -> List[Dict[str, Any]]:
    """Run ``args.iterations`` ES iterations, updating ``theta`` in place; returns each
    iteration's statistics."""
    rng = np.random.default_rng(args.seed + 2)
    adam = Adam(theta.size, args.lr)
    history = []
    for i in range(args.iterations):
        stats = es_step(pool, noise, theta, adam, rng, args)
        history.append(stats)
        report(i, stats)
    return history


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--iterations", type=int, default=30, help="ES iterations")
    p.add_argument("--pairs", type=int, default=24, help="antithetic pairs per iteration")
    p.add_argument("--processes", type=int, default=None, help="pool size (cpu_count)")
    p.add_argument("--max-steps", type=int, default=300, help="steps per episode at most")
    p.add_argument("--noise-mb", type=float, default=100.0, help="shared noise table size")
    p.add_argument("--hidden", type=int, default=16, help="hidden units of the policy")
    p.add_argument("--sigma", type=float, default=0.1, help="perturbation scale")
    p.add_argument("--lr", type=float, default=0.03, help="Adam step size")
    p.add_argument("--l2", type=float, default=0.005, help="weight decay")
    p.add_argument("--init-scale", type=float, default=0.5,
                   help="scale of the initial random policy")
    p.add_argument("--eval-episodes", type=int, default=4,
                   help="episodes on which the policy is scored before and after")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the noise table, the initial policy and the episodes")
    args = p.parse_args(argv)
    for name in ("iterations", "pairs", "max_steps", "hidden", "eval_episodes"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.processes is not None and args.processes < 1:
        p.error("--processes must be at least 1")
    if args.sigma <= 0 or args.lr <= 0 or args.noise_mb <= 0:
        p.error("--sigma, --lr and --noise-mb must be positive")
    if int(args.noise_mb * (1 << 20)) // 4 < policy_size(args.hidden):
        p.error(f"--noise-mb is too small for a policy of {policy_size(args.hidden)} "
                "parameters")
    return args


def print_iteration(i: int, stats: Dict[str, Any]) -> None:
    print(f"iteration {i:3d}  reward mean {stats['reward_mean']:8.2f} "
          f"max {stats['reward_max']:8.2f}  {stats['seconds']:6.2f} s  "
          f"{stats['steps_per_s']:7.0f} steps/s", flush=True)


def main(argv: Optional[Sequence[str]] = None, context: Any = None) -> Dict[str, Any]:
    """Train with the command line's settings; ``context``: a fiber (or multiprocessing)
    context to take the Pool from (default: fiber's configured backend). Returns the
    policy and its score before and after, and each iteration's statistics."""
    args = parse_args(argv)
    check_environment()
    ctx = context if context is not None else fiber.get_context()
    processes = args.processes or os.cpu_count() or 1
    noise = make_noise(args.noise_mb, args.seed)
    theta = initial_policy(args)
    print(f"{ENV_ID}: {args.pairs} antithetic pairs x {args.iterations} iterations on "
          f"{processes} workers ({type(ctx).__module__.split('.')[0]}), policy of "
          f"{theta.size} parameters, noise table {noise.nbytes / 1e6:.0f} MB", flush=True)
    start = time.perf_counter()
    with ctx.Pool(processes, initializer=init_worker, initargs=(noise,)) as pool:
        before = policy_reward(pool, theta, args)
        print(f"policy reward before: {before:8.2f} (mean of {args.eval_episodes} episodes)",
              flush=True)
        theta_before = theta.copy()
        history = train(pool, noise, theta, args, print_iteration)
        after = policy_reward(pool, theta, args)
    print(f"policy reward after:  {after:8.2f}; {time.perf_counter() - start:.1f} s in all")
    return {"reward_before": before, "reward_after": after, "theta_before": theta_before,
            "theta_after": theta, "history": history}


if __name__ == "__main__":
    main()
