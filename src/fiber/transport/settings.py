"""What the transport reads of the program's configuration, as arguments: the transport
imports nothing above it (a `fiber.Config` has these fields; tools and tests use
`DEFAULTS`)."""

from __future__ import annotations

import dataclasses
from typing import Callable, Protocol

__all__ = ["Settings", "SettingsSource", "DEFAULTS", "defaults"]


class Settings(Protocol):
    """What the transport reads of the program's configuration (a `fiber.Config`
    has it): asked for again at each use, so that a changed configuration applies."""

    @property
    def spin_us(self) -> float:
        """Microseconds a thread waiting for a reply may poll first (see `cpus`)."""

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between keepalive probes of an idle connection."""

    @property
    def heartbeat_timeout(self) -> float:
        """Seconds a connection may stay silent or unacknowledged before it is lost."""


@dataclasses.dataclass(frozen=True)
class _Defaults:
    spin_us: float = 0.0
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 30.0


#: The settings of a client made without the program's (tools, tests): no polling.
DEFAULTS: Settings = _Defaults()
SettingsSource = Callable[[], Settings]


def defaults() -> Settings:
    return DEFAULTS
