"""The settings of the ``docker`` backend.

Each key is ``docker_<key>`` in ``fiber.init``, ``FIBER_DOCKER_<KEY>`` in the environment, and
``<key>`` in the ``[fiber.docker]`` section of ``.fiberconfig`` (see ``fiber.config``); its
meaning is its ``#:`` comment, shown in the generated configuration reference."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Tuple

__all__ = ["DockerSettings"]


@dataclasses.dataclass(frozen=True)
class DockerSettings:
    """What the program's configuration says of the ``docker`` backend."""

    #: ``FIBER_DOCKER_*`` variables that are not settings (never warned about).
    variables: ClassVar[Tuple[str, ...]] = (
        "FIBER_DOCKER_PROGRAM", "FIBER_DOCKER_MAIN_SOCKET",  # set for its jobs
        # read by its test engine (scripts/container-engine.sh)
        "FIBER_DOCKER_BRIDGE", "FIBER_DOCKER_CACHE", "FIBER_DOCKER_DIR", "FIBER_DOCKER_NET",
        "FIBER_DOCKER_START_TIMEOUT"
    )

    #: Docker engine of the ``docker`` backend (``unix:///var/run/docker.sock``,
    #: ``tcp://host:2376``); empty: ``DOCKER_HOST`` (and ``DOCKER_TLS_VERIFY``,
    #: ``DOCKER_CERT_PATH``), else the engine's default socket.
    host: str = ""
    #: Network of fiber's containers: ``host`` (the host's network stack: jobs reach the
    #: master on 127.0.0.1), ``bridge`` or a user-defined network (the master listens on
    #: its gateway unless ``listen_host`` is set); empty: the master's own network when it
    #: runs in a container, else the engine's default (``bridge``).
    network: str = ""
    #: Python interpreter inside the image (``python`` wins when set); empty: the master's
    #: own interpreter path when the jobs run the master's own image, else ``python3``.
    python: str = ""
    #: Bind mounts of every container, comma-separated ``host_path[:container_path][:ro]``
    #: (``/data:/data:ro,/scratch``); the container path defaults to the host path.
    mounts: str = ""
    #: Seconds each call to the Docker engine may take before it fails (no hang).
    timeout: float = 60.0
    #: Containers share the host's PID namespace (``--pid=host``, no init process): on an
    #: engine reached through a Unix socket, ``Process.pid`` is then a pid of this host,
    #: that of the job's first process (its output relay, which passes signals on to the
    #: job), and the job can be signalled by it. False: each container has its own PID
    #: namespace, and fiber uses synthetic pids.
    pid_host: bool = False

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, got {self.timeout!r}")
