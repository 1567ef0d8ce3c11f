"""The per-process state of one layer: the API layer's: the top-level modules, `config`,
`dashboard`, `queues`, `synchronize`, `managers`, `pool` and `ring`.
Its one instance is ``here.api`` (`fiber._process_state`)."""

from __future__ import annotations

__all__ = ["ApiState"]


class ApiState:
    """What this process keeps for that layer; each attribute says whose it is."""

    def __init__(self) -> None:
        pass
