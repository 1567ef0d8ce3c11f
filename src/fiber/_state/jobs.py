"""The per-process state of one layer: the processes' (`fiber.process`) and the backends'
(`fiber.backends`). Its one instance is ``here.jobs``
(`fiber._process_state`)."""

from __future__ import annotations

__all__ = ["JobsState"]


class JobsState:
    """What this process keeps for that layer; each attribute says whose it is."""

    def __init__(self) -> None:
        pass
