"""The per-process state of one layer: the transport's (`fiber.transport`), the connections'
(`fiber.connection`) and the hub's and its services' (`fiber._core`).
Its one instance is ``here.transport`` (`fiber._process_state`)."""

from __future__ import annotations

__all__ = ["TransportState"]


class TransportState:
    """What this process keeps for that layer; each attribute says whose it is."""

    def __init__(self) -> None:
        pass
