"""A main program for ``fiber run`` (tests/test_cli.py, test_docker.py, test_kubernetes.py).

Maps over a pool of 2 on whatever backend its config names, prints ``RESULT <json>``: the
results, the config it was given and where it and its workers ran; then exits with the
code given as its argument. With ``hold``, it prints ``READY <json>`` instead and then
sleeps, pool open, until it is stopped.
"""

import json
import os
import socket
import sys
import time

import fiber
from fiber.backends.docker._util import own_container_id


def where(_: object = None) -> str:
    """The container this runs in, else host:pid (a while: a worker that connects late
    still gets some of these tasks)."""
    if _ is not None:
        time.sleep(0.2)
    return own_container_id() or f"{socket.gethostname()}:{os.getpid()}"


def square(x: int) -> int:
    return x * x


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "0"
    cfg = fiber.config.get_config()
    with fiber.Pool(2) as pool:
        squares = pool.map(square, range(20))
        workers = sorted(set(pool.map(where, range(20), chunksize=1)))
        out = {"squares": squares, "backend": cfg.backend, "prefetch": cfg.pool_prefetch,
               "main": where(), "host": socket.gethostname(), "workers": workers}
        if arg == "hold":
            print("READY " + json.dumps(out), flush=True)
            time.sleep(600)
    print("RESULT " + json.dumps(out), flush=True)
    sys.exit(int(arg))
