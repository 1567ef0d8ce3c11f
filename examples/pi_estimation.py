"""Estimate pi with fiber processes: each job throws darts, the master adds up the hits.

Runs unchanged on any backend:  python examples/pi_estimation.py
                                FIBER_BACKEND=slurm python examples/pi_estimation.py
"""

import random
import time

import fiber


@fiber.meta(cpu=1)
def throw_darts(n: int, seed: int, results: fiber.Queue) -> None:
    rng = random.Random(seed)
    hits = sum(1 for _ in range(n) if rng.random() ** 2 + rng.random() ** 2 <= 1.0)
    results.put((fiber.current_process().name, hits))


def main(workers: int = 4, darts_per_worker: int = 500_000) -> float:
    results = fiber.Queue()
    jobs = [fiber.Process(target=throw_darts, args=(darts_per_worker, seed, results))
            for seed in range(workers)]
    start = time.time()
    for job in jobs:
        job.start()
    hits = 0
    for _ in jobs:
        name, h = results.get(timeout=300)
        print(f"  {name}: {h} hits")
        hits += h
    for job in jobs:
        job.join()
    pi = 4.0 * hits / (workers * darts_per_worker)
    print(f"pi ~= {pi:.5f} from {workers} jobs on backend {fiber.get_config().backend!r}"
          f" in {time.time() - start:.2f} s")
    return pi


if __name__ == "__main__":
    main()
