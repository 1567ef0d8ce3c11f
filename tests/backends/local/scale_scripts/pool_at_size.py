"""A pool of N workers maps N sleep tasks: python pool_at_size.py N [SECONDS].

Prints how many workers ran the first round and 'ok' when every result is right; what
goes wrong is on stderr (the test asserts it stays empty).
"""

import os
import sys
import time

import fiber


def nap(i: int) -> tuple:
    time.sleep(SECONDS)
    return i, os.getpid()


SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5

if __name__ == "__main__":
    n = int(sys.argv[1])
    started = time.monotonic()
    with fiber.Pool(n) as pool:
        results = pool.map(nap, range(n), chunksize=1)
        assert [i for i, _ in results] == list(range(n)), "results out of order or lost"
        workers = len({pid for _, pid in results})
        # a second round: every worker is up now
        again = pool.map(nap, range(n), chunksize=1)
        assert [i for i, _ in again] == list(range(n))
    print(f"workers {workers} seconds {time.monotonic() - started:.1f}")
    print("ok")
