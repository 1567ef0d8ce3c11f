"""Estimate pi with a pool of fiber workers, and with processes and a queue.

Runs unchanged on any backend:  python examples/pi_estimation.py
                                FIBER_BACKEND=slurm python examples/pi_estimation.py
"""

import random
import time

import fiber


def throw_darts(seed: int, n: int = 200_000) -> int:
    """How many of ``n`` random darts land inside the quarter circle."""
    rng = random.Random(seed)
    return sum(1 for _ in range(n) if rng.random() ** 2 + rng.random() ** 2 <= 1.0)


@fiber.meta(cpu=1, memory=256)
def report_darts(seed: int, results: fiber.Queue) -> None:
    results.put((fiber.current_process().name, throw_darts(seed)))


def with_pool(workers: int, batches: int) -> float:
    start = time.time()
    with fiber.Pool(workers, cpu=1, memory=256) as pool:
        hits = pool.map(throw_darts, range(batches))
    pi = 4.0 * sum(hits) / (batches * 200_000)
    print(f"Pool.map:  pi ~= {pi:.5f} from {batches} tasks on {workers} workers "
          f"in {time.time() - start:.2f} s")
    return pi


def with_processes(workers: int) -> float:
    start = time.time()
    results = fiber.Queue()
    jobs = [fiber.Process(target=report_darts, args=(seed, results)) for seed in range(workers)]
    for job in jobs:
        job.start()
    hits = [results.get(timeout=300) for _ in jobs]
    for job in jobs:
        job.join()
    pi = 4.0 * sum(h for _, h in hits) / (workers * 200_000)
    print(f"Processes: pi ~= {pi:.5f} from {workers} jobs ({', '.join(n for n, _ in hits)}) "
          f"in {time.time() - start:.2f} s")
    return pi


if __name__ == "__main__":
    print(f"backend: {fiber.get_config().backend}")
    with_pool(workers=4, batches=40)
    with_processes(workers=4)
