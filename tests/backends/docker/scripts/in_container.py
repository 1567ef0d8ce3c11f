"""A master that itself runs in a container of the engine (started by
tests/backends/docker/test_docker.py with the engine's socket mounted, ``DOCKER_HOST`` set
and host networking), with neither ``image`` nor ``docker_network`` set: its children must
run its own image on its own network. Prints ``RESULT <json>``.
"""

import json
import sys

import fiber
from fiber.backends import get_backend
from fiber.backends.docker import own_container_id


def answer(q):
    q.put("hello from a child")


def main() -> None:
    fiber.init(backend="docker", image="", docker_network="", docker_mounts="")
    backend = get_backend("docker")
    q = fiber.Queue()
    p = fiber.Process(target=answer, args=(q,))
    p.start()
    got = q.get(timeout=60)
    api = backend._engine().api
    (child,) = api.containers(filters={"label": f"fiber.job={p._job.handle.job_id}"},
                              all=True)
    info = api.inspect_container(child["Id"])
    p.join(60)
    print("RESULT " + json.dumps({
        "own": own_container_id(), "got": got, "exitcode": p.exitcode,
        "child_image": info["Image"], "child_network": info["HostConfig"]["NetworkMode"],
        "child_command": info["Config"]["Cmd"], "executable": sys.executable,
    }), flush=True)


if __name__ == "__main__":
    main()
