"""A master with a pool of two containers and one more container-backed process, for
tests/backends/docker/test_docker.py. Prints ``READY <program id>`` once the pool's workers
answer, then:

- ``wait``: sleeps until it is killed (the test SIGKILLs it: the children's lifeline must
  end every container);
- ``exit``: exits normally while a daemonic process still runs (the backend's exit hook
  must remove every container of this program).
"""

import sys
import time

import fiber
from fiber.backends import get_backend


def sleep(seconds):
    time.sleep(seconds)


def main() -> None:
    fiber.init(backend="docker", image=sys.argv[2], docker_network="host", docker_mounts="")
    backend = get_backend("docker")
    pool = fiber.Pool(2)
    assert pool.map(abs, [-1, -2, -3, -4], 1) == [1, 2, 3, 4]
    p = fiber.Process(target=sleep, args=(300,), daemon=True)
    p.start()
    print(f"READY {backend.program}", flush=True)
    if sys.argv[1] == "wait":
        time.sleep(600)
    # "exit": leave with the pool's workers and the daemonic process still running


if __name__ == "__main__":
    main()
