"""Monte Carlo pi with a Pool that is never closed (left to the interpreter's exit), in
the style of the original fiber's examples/pi_estimation.py (written here)."""

import random

from fiber import Pool

SAMPLES = 20000


def inside(_):
    x, y = random.random(), random.random()
    return x * x + y * y < 1


def main():
    pool = Pool(processes=4)
    pi = 4.0 * sum(pool.map(inside, range(SAMPLES))) / SAMPLES
    print(f"Pi is roughly {pi}")
    assert 2.9 < pi < 3.4


if __name__ == "__main__":
    main()
