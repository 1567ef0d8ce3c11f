"""Requests named once per protocol, and dispatched through a table built once per
service class. The design: docs/contributing/transport.md, "Operations"."""

from __future__ import annotations

import struct
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ClassVar,
    Dict,
    List,
    Optional,
    Protocol,
    Sequence,
    Type,
    TypeVar,
)

from .framing import ProtocolError
from .serialization import Frame

if TYPE_CHECKING:
    from .peers import Peer

__all__ = ["handles", "Dispatcher", "Service", "Handler", "names", "Record", "reply_of",
           "MalformedReply"]

#: A handler: ``(service, server, peer, req_id, payload) -> None``, ``payload`` the
#: request's frames, or its `Record` where the operation names one.
Handler = Callable[..., None]
F = TypeVar("F", bound=Handler)
R = TypeVar("R", bound="Record")

_MARK = "fiber_operation"


class Record(Protocol):
    """A request's (or a reply's) typed form, defined once beside its service: what its
    frames hold, read by the service (`decode`, before its handler runs) and written by
    the client (`frames`); a reply's the other way round, read with `reply_of`. A
    ``NamedTuple`` with these two methods is one."""

    @classmethod
    def decode(cls: Type[R], payload: Sequence[Frame]) -> R:
        """The record a request's frames carry.

        Raises:
            struct.error, IndexError, ValueError: the frames are not such a request
                (the server replies it as the request's error).
        """

    def frames(self) -> List[Frame]:
        """The request's frames, as `decode` reads them."""


class MalformedReply(ProtocolError):
    """A reply whose frames are not what its record says its service answers."""


def reply_of(record: Type[R], frames: Sequence[Frame]) -> R:
    """A reply's frames as ``record`` (a reply's record, beside its service), or a
    clear error: a malformed reply is a peer's fault, not the caller's.

    Raises:
        MalformedReply: the frames are not such a reply (naming the record).
    """
    try:
        return record.decode(frames)
    except (struct.error, IndexError, ValueError) as e:
        raise MalformedReply(f"a malformed {record.__name__} reply "
                             f"({len(frames)} frames): {e}") from e


def handles(op: bytes, record: Optional[Type[Record]] = None) -> Callable[[F], F]:
    """Mark a method of a service as the handler of requests for operation ``op``; with
    a ``record``, the handler is given the request as that record, not its frames."""
    if not isinstance(op, bytes) or not op:
        raise TypeError(f"an operation is a non-empty bytes name, not {op!r}")

    def mark(fn: F) -> F:
        setattr(fn, _MARK, (op, record))
        return fn

    return mark


def _decoding(fn: Handler, record: Type[Record]) -> Handler:
    """``fn``, called with its request's frames decoded into ``record``."""
    decode = record.decode

    def decoded(service: Any, server: Any, peer: Any, req_id: bytes,
                payload: Sequence[Frame]) -> None:
        fn(service, server, peer, req_id, decode(payload))

    return decoded


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
            mark = getattr(value, _MARK, None)
            if mark is None:
                continue
            op, record = mark
            if op in own:
                raise TypeError(f"{cls.__qualname__}: {own[op]} and {name} both handle {op!r}")
            own[op] = name
            table[op] = value if record is None else _decoding(value, record)
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
