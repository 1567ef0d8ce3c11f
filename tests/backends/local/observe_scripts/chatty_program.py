"""A program for tests/backends/local/test_observe_local.py: a pool of 2 whose workers print, and a
Process that prints and sleeps; it prints ``READY <json>`` and waits until it is stopped
(or 120 s)."""

import json
import sys
import time

import fiber


def hello(x):
    print(f"hello from task {x}", flush=True)
    return x


def nap(seconds):
    print("napping", flush=True)
    time.sleep(seconds)


if __name__ == "__main__":
    pool = fiber.Pool(2)
    pool.map(hello, range(4), chunksize=1)
    p = fiber.Process(target=nap, args=(120,), name="Napper")
    p.start()
    print("READY " + json.dumps({"job": p.job_id, "pid": p.pid}), flush=True)
    time.sleep(120)
    sys.exit(3)
