"""The ``docker`` backend: every fiber process is a container of one Docker engine.

- `_backend`: `DockerBackend` (create, watch, remove containers).
- `_util`: what the backend needs of the engine and of this container (its id,
  mounts, exit statuses).
"""

from ..._exports import publish
from ._backend import (
    LABEL_JOB,
    LABEL_NAME,
    LABEL_PROGRAM,
    DockerBackend,
    exit_status,
    own_container_id,
    parse_mounts,
)

__all__ = ["DockerBackend", "exit_status", "parse_mounts", "own_container_id", "LABEL_PROGRAM",
           "LABEL_JOB", "LABEL_NAME"]

publish(__name__, DockerBackend)
