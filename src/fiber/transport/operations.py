"""Requests named once per protocol, and dispatched through a table built once per
service class. The design: docs/contributing/transport.md, "Operations"."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, TypeVar

from .serialization import Frame

if TYPE_CHECKING:
    from .peers import Peer

__all__ = ["handles", "Dispatcher", "Service", "Handler", "names"]

#: A handler: ``(service, server, peer, req_id, payload) -> None``.
Handler = Callable[..., None]
F = TypeVar("F", bound=Handler)

_MARK = "fiber_operation"


def handles(op: bytes) -> Callable[[F], F]:
    """Mark a method of a service as the handler of requests for operation ``op``."""
    if not isinstance(op, bytes) or not op:
        raise TypeError(f"an operation is a non-empty bytes name, not {op!r}")

    def mark(fn: F) -> F:
        setattr(fn, _MARK, op)
        return fn

    return mark


def names(ops: type) -> Dict[str, bytes]:
    """The operations a protocol's class names (``{"PUT": b"put", ...}``)."""
    return {k: v for k, v in vars(ops).items() if k.isupper() and isinstance(v, bytes)}


class Dispatcher:
    """A service whose requests are dispatched by operation, through its class's table."""

    #: What the protocol is called in errors ("unknown queue operation b'x'").
    protocol: ClassVar[str] = "fiber"
    #: operation -> handler, built from the marked methods (see the module docstring).
    operations: ClassVar[Dict[bytes, Handler]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        table = dict(cls.operations)
        own: Dict[bytes, str] = {}
        for name, value in vars(cls).items():
            op = getattr(value, _MARK, None)
            if op is None:
                continue
            if op in own:
                raise TypeError(f"{cls.__qualname__}: {own[op]} and {name} both handle {op!r}")
            own[op] = name
            table[op] = value
        cls.operations = table

    def handler(self, op: bytes) -> Handler:
        """The handler of ``op`` (call it with the service first).

        Raises:
            ValueError: the protocol has no operation ``op``.
        """
        handler = self.operations.get(op)
        if handler is None:
            raise ValueError(f"unknown {self.protocol} operation {op!r}")
        return handler

    def handle(self, server: Any, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Frame]) -> None:
        """Hand the request to the handler of ``op``.

        Raises:
            ValueError: the protocol has no operation ``op``.
        """
        self.handler(op)(self, server, peer, req_id, payload)


class Service(Dispatcher):
    """Something served on a `fiber.transport.server.Server`; every method runs under
    ``Server.lock``. Its requests go to the handlers of its operations (see
    `operations`)."""

    #: Whether every request it takes is answered, even when the connection that asked
    #: ends first (nothing is dropped with its connection). The server then keeps the
    #: answer to a request whose id is a ticket (`fiber.transport.receipts`): asked again
    #: on a new connection after a reset, it is answered again, not served twice.
    answers_again = False

    def peer_gone(self, server: Any, peer: Peer) -> None:
        """A connection closed; drop what it was waiting for."""

    def process_gone(self, server: Any, process_id: bytes) -> None:
        """A process lost its anchor connection: it ended or is unreachable."""
