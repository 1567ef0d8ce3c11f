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

    @property
    def tls(self) -> str:
        """Whether connections between hosts speak TLS: ``off``, ``auto`` or ``on``."""

    @property
    def tls_ca_file(self) -> str:
        """A site's certificate authority file ('': the program's own; see `credentials`)."""

    @property
    def tls_cert_file(self) -> str:
        """A site's certificate file for this program's processes ('': the program's own)."""

    @property
    def tls_key_file(self) -> str:
        """The key file of ``tls_cert_file`` ('': the program's own)."""


@dataclasses.dataclass(frozen=True)
class _Defaults:
    spin_us: float = 0.0
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 30.0
    tls: str = "off"
    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""


#: The settings of a client made without the program's (tools, tests): no polling.
DEFAULTS: Settings = _Defaults()
SettingsSource = Callable[[], Settings]


def defaults() -> Settings:
    return DEFAULTS
