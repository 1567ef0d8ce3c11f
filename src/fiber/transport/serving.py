"""The context manager of `fiber.transport.server.Server.serving`: a block in which
a thread serves the server's connections in place of its thread (see ``wait_serving``)."""

from __future__ import annotations

import threading
from typing import Any, Protocol

__all__ = ["Serving"]


class _Servable(Protocol):
    @property
    def stand_in(self) -> Any: ...

    def take_over(self) -> bool: ...

    def hand_back(self) -> None: ...


class Serving:
    """The context manager of `Server.serving` (a class: a generator-based one
    costs 2.5 us, several times a round trip)."""

    __slots__ = ("server", "took")

    def __init__(self, server: _Servable) -> None:
        self.server = server
        self.took = False

    def start(self) -> bool:
        """Serve from now on (if this thread can); whether it does."""
        server = self.server
        if self.took or server.stand_in == threading.get_ident():
            return True  # already (or an enclosing block serves)
        self.took = server.take_over()
        return self.took

    def stop(self) -> None:
        """Give the connections back to the server thread (if taken by ``start``)."""
        if self.took:
            self.took = False
            self.server.hand_back()

    def __enter__(self) -> bool:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
