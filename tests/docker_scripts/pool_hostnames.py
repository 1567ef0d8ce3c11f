"""A pool of containers on the engine's *bridge* network, with no bind mount: the image's
own fiber runs the workers (this script is ``__main__``, so its functions travel by value)
and the master listens on the bridge's gateway. Prints ``RESULT <json>``: the hostname each
task ran on, this master's program id, and the ids of its containers.

Run by tests/test_docker.py in a fresh interpreter (a process's hub binds one address).
"""

import json
import socket
import sys
import time

import fiber
from fiber._core import _runtime
from fiber.backends import get_backend


def where(x):
    time.sleep(0.2)  # long enough that every worker gets tasks
    return socket.gethostname()


def main() -> None:
    fiber.init(backend="docker", image=sys.argv[1], docker_network="bridge", docker_mounts="")
    backend = get_backend("docker")
    with fiber.Pool(3) as pool:
        hosts = pool.map(where, range(24), 1)
        api = backend._engine().api
        ids = [c["Id"] for c in api.containers(
            filters={"label": f"fiber.program={backend.program}"})]
    print("RESULT " + json.dumps({"hosts": hosts, "program": backend.program, "ids": ids,
                                  "listen": _runtime.hub().address}), flush=True)


if __name__ == "__main__":
    main()
