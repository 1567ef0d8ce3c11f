"""The settings of the ``local`` backend.

Each key is ``local_<key>`` in ``fiber.init``, ``FIBER_LOCAL_<KEY>`` in the environment, and
``<key>`` in the ``[fiber.local]`` section of ``.fiberconfig`` (see ``fiber.config``); its
meaning is its ``#:`` comment, shown in the generated configuration reference."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Tuple

__all__ = ["LocalSettings"]


@dataclasses.dataclass(frozen=True)
class LocalSettings:
    """What the program's configuration says of the ``local`` backend."""

    #: ``FIBER_LOCAL_*`` variables that are not settings (never warned about).
    variables: ClassVar[Tuple[str, ...]] = (
        "FIBER_LOCAL_PROGRAM",  # set for its jobs
    )

    #: Local backend: start jobs by forking a pre-imported template process (a fork
    #: server, started with the first job) instead of a new interpreter per job; False:
    #: every job is a subprocess.
    fork_server: bool = True
    #: Modules the local fork server imports before it forks jobs: comma-separated names,
    #: ``auto`` (the third-party packages the master has imported from site-packages, e.g.
    #: numpy) or empty (only fiber). Read when the fork server starts.
    preload: str = "auto"
