"""What a manager's proxies and the manager say to its services: the operations of the
managed-object protocol (a proxy's requests to its object, `ObjectService`) and of the
manager's own (`ManagerService`), and their requests as typed records
(docs/contributing/transport.md, "Operations")."""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..transport.serialization import Frame, dumps, loads

__all__ = ["ObjectOps", "Call", "ProxyHandoff", "ManagerOps", "Create", "Created"]


class ObjectOps:
    """The managed-object protocol's operations (a proxy's requests to its object)."""

    CALL = b"call"
    ATTACH = b"attach"
    HANDOFF = b"handoff"
    RELEASE = b"release"
    DETACH = b"detach"
    GETVALUE = b"getvalue"
    REPR = b"repr"


class Call(NamedTuple):
    """``call``: the method's name, arguments and keywords, pickled by the caller, and
    kept so until the call runs: unpickled (`unpickled`) on the worker thread that runs
    it, as an argument that is a proxy makes a request of its own when unpickled."""

    pickled: Sequence[Frame]  # dumps((method, args, kwds))

    @classmethod
    def of(cls, method: str, args: Sequence[object] = (),
           kwds: Optional[Dict[str, object]] = None) -> Call:
        """The call of ``method`` with ``args`` and ``kwds`` (a proxy's)."""
        return cls(dumps((method, tuple(args), kwds or {})))

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Call:
        if not payload:
            raise ValueError("a call without its method")
        return cls(payload)

    def frames(self) -> List[Frame]:
        return list(self.pickled)

    def holds_proxies(self) -> bool:
        """Whether its arguments hold proxies (to unpickle on a worker thread)."""
        return b"_rebuild_proxy" in bytes(self.pickled[0])

    def unpickled(self) -> Tuple[str, Tuple[object, ...], Dict[str, object]]:
        """The method's name, arguments and keywords.

        Raises:
            ValueError: the pickle is not such a call.
        """
        method, args, kwds = loads(self.pickled)
        return method, args, kwds


class ProxyHandoff(NamedTuple):
    """``handoff``, ``attach``, ``release``: the token of one pickle of a proxy (what
    the process that unpickles it attaches with)."""

    token: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> ProxyHandoff:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.token]


class ManagerOps:
    """The manager protocol's operations (requests to its ``MANAGER_SERVICE``)."""

    CREATE = b"create"
    CREATED = b"created"
    PING = b"ping"
    COUNT = b"count"
    SHUTDOWN = b"shutdown"


class Create(NamedTuple):
    """``create``: the type id, and the arguments and keywords to make the object with
    (pickled together, unpickled on the hub thread)."""

    typeid: str
    args: Tuple[object, ...]
    kwds: Dict[str, object]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Create:
        typeid, args, kwds = loads(payload)
        return cls(typeid, args, kwds)

    def frames(self) -> List[Frame]:
        return dumps((self.typeid, self.args, self.kwds))


class Created(NamedTuple):
    """``created``: an object job's report, the answer to the creation waiting for it:
    its creation id, and the answer's status and frames (the object's Spec, or the
    error, pickled by the job and forwarded as they came)."""

    cid: bytes
    status: bytes
    reply: Sequence[Frame]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Created:
        return cls(bytes(payload[0]), bytes(payload[1]), payload[2:])

    def frames(self) -> List[Frame]:
        return [self.cid, self.status, *self.reply]
