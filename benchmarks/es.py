"""Evolution strategies on BipedalWalker: fiber against multiprocessing, in the same run.

The ES loop of ``examples/es_bipedal.py`` (antithetic pairs read from a shared noise
table, rank shaping, Adam) with the same seeds on ``fiber.Pool`` (the configured
backend, local by default) and on ``multiprocessing.Pool`` with the fork context, whose
workers inherit the parent's noise table instead of receiving it. For each:

- **start + first iteration**: from ``Pool(...)`` to the end of the first iteration: it
  includes starting the workers and handing each the noise table (``initargs``);
- **later iterations**: mean wall time of the others, and environment steps per second;
- **workers' PSS**: proportional set size of every process the master started
  (``/proc/PID/smaps_rollup``, fiber's fork server included), after the first iteration:
  one copy of the table shared by all of them, or one each;
- whether both ran the same computation (same rewards, to the bit).

Usage::

    python benchmarks/es.py [--processes 8] [--noise-mb 100] [--iterations 5]
                            [--pairs 16] [--max-steps 200] [--repeat 1]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from typing import Any, Callable, Dict, List

import numpy as np
import psutil

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import es_bipedal as es  # noqa: E402
from _common import table  # noqa: E402

import fiber  # noqa: E402


def descendants_pss_mb() -> float:
    total = 0
    for p in psutil.Process().children(recursive=True):
        try:
            total += p.memory_full_info().pss
        except psutil.Error:
            pass
    return total / 1e6


def run(make_pool: Callable[..., Any], args: argparse.Namespace) -> Dict[str, Any]:
    """One ES run: the pool is made (and the table handed over) inside the timing."""
    noise = es.make_noise(args.noise_mb, args.seed)
    theta = es.initial_policy(args)
    rng = np.random.default_rng(args.seed + 2)
    adam = es.Adam(theta.size, args.lr)
    start = time.perf_counter()
    with make_pool(args.processes, initializer=es.init_worker, initargs=(noise,)) as pool:
        stats = [es.es_step(pool, noise, theta, adam, rng, args)]
        first = time.perf_counter() - start
        pss = descendants_pss_mb()
        for _ in range(args.iterations - 1):
            stats.append(es.es_step(pool, noise, theta, adam, rng, args))
    later = stats[1:] or stats
    return {"first": first, "later": sum(s["seconds"] for s in later) / len(later),
            "steps_per_s": sum(s["steps"] for s in later) / sum(s["seconds"] for s in later),
            "pss": pss, "rewards": [s["reward_mean"] for s in stats]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each pool, alternated")
    known, rest = parser.parse_known_args()
    defaults = ["--iterations", "5", "--pairs", "16", "--max-steps", "200"]
    args = es.parse_args(defaults + rest)
    args.processes = known.processes
    es.check_environment()
    print(f"ES on {es.ENV_ID}: {known.processes} workers, {args.pairs} pairs x "
          f"{args.iterations} iterations, episodes of at most {args.max_steps} steps, noise "
          f"table {args.noise_mb:.0f} MB; backend {fiber.get_config().backend}; "
          f"{os.cpu_count()} cores")
    pools = {"multiprocessing (fork)": multiprocessing.get_context("fork").Pool,
             "fiber": fiber.Pool}
    results: Dict[str, List[Dict[str, Any]]] = {name: [] for name in pools}
    for _ in range(known.repeat):
        for name, make_pool in pools.items():
            results[name].append(run(make_pool, args))
    keys = ("first", "later", "steps_per_s", "pss")
    best = {name: {k: (max if k == "steps_per_s" else min)(r[k] for r in runs) for k in keys}
            for name, runs in results.items()}
    mp, fb = best["multiprocessing (fork)"], best["fiber"]
    rows = [[name, b["first"], b["later"], b["steps_per_s"], b["pss"]] for name, b in best.items()]
    rows.append(["fiber / multiprocessing", fb["first"] / mp["first"], fb["later"] / mp["later"],
                 fb["steps_per_s"] / mp["steps_per_s"], fb["pss"] / mp["pss"]])
    table(f"best of {known.repeat} run(s)",
          ["pool", "start + 1st iteration (s)", "later iteration (s)", "steps/s",
           "workers' PSS (MB)"], rows)
    same = all(r["rewards"] == results["fiber"][0]["rewards"]
               for runs in results.values() for r in runs)
    print(f"\nsame rewards from both pools, every run: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
