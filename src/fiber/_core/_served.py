"""Objects served by the hub of the process that created them (queues, pipes, locks...).

The creating process registers a `Service` on its hub; the
object itself is only a handle — the hub's address and the service's name — that pickles
to a few bytes and works from any fiber process on any host. In the creating process the
handle talks to its hub over ``inproc://``; elsewhere over authenticated TCP.

Blocking calls (``get``, ``recv``, ``acquire``) are waits on the server, which answers when
the call can complete or its timeout passes; the client only waits for the answer, so a
timeout is decided in one place.
"""

from __future__ import annotations

import contextlib
import secrets
import struct
import weakref
from multiprocessing import context as mp_context
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

from .._process_state import here
from ..transport import auth, receipts
from ..transport.client import Client, ConnectionLost, again_on_a_new_connection
from ..transport.local import Channel, LateReply
from ..transport.remote import unpack_exception
from ..transport.serialization import Frame, loads
from ..transport.server import Server, Service
from . import _runtime
from ._clients import get_client

__all__ = ["Handle", "encode_wait", "decode_wait", "wait_seconds", "pack_wait", "Wait", "Count",
           "collecting_handoffs", "add_handoff",
           "probing"]


_WAIT = struct.Struct("<d")
_FOREVER = _WAIT.pack(-1.0)


def wait_seconds(block: bool, timeout: Optional[float]) -> Optional[float]:
    """How long the server may hold a request made with ``block`` and ``timeout``: 0
    (answer now), ``timeout`` s, or None (forever)."""
    if not block:
        return 0.0
    return None if timeout is None else max(0.0, float(timeout))


def pack_wait(seconds: Optional[float]) -> bytes:
    """A wait of `wait_seconds` on the wire (what `decode_wait` reads)."""
    return _FOREVER if seconds is None else _WAIT.pack(seconds)


def encode_wait(block: bool, timeout: Optional[float]) -> bytes:
    """How long the server may hold a request: not at all, ``timeout`` s, or forever."""
    return pack_wait(wait_seconds(block, timeout))


def decode_wait(frame: Frame) -> Optional[float]:
    """Seconds the server may hold the request (0: answer now; None: forever)."""
    (t,) = struct.unpack("<d", frame)
    return None if t < 0 else t


class Wait(NamedTuple):
    """A request that may wait (an ``acquire``, an event's ``wait``): how long its
    service may hold it before it answers (``encode_wait``)."""

    seconds: Optional[float]  # 0: answer now; None: as long as it takes

    @classmethod
    def of(cls, block: bool, timeout: Optional[float]) -> Wait:
        """The wait of a call made with ``block`` and ``timeout``."""
        return cls(wait_seconds(block, timeout))

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Wait:
        return cls(decode_wait(payload[0]))

    def frames(self) -> List[Frame]:
        return [pack_wait(self.seconds)]


_COUNT = struct.Struct("<q")


class Count(NamedTuple):
    """A reply that is one number (an i64): a semaphore's value, a queue's size, the
    recursion a lock's ``release_save`` let go of, a barrier's arrival index."""

    n: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Count:
        return cls(_COUNT.unpack(payload[0])[0])

    def frames(self) -> List[Frame]:
        return [_COUNT.pack(self.n)]


#: A `Handle` pickled: its service's name and hub's address (and, for a child of
#: multiprocessing, the program's secret).
HandleState = Union[Tuple[bytes, str], Tuple[bytes, str, bytes]]


class Handle:
    """The picklable client side of an object served on some process's hub.

    Lifetime: an object never shared is unregistered when its creator drops it; once it
    has been pickled (sent to another process, which may hold it longer than the
    creator), it is served until the creating process ends.
    """

    #: Whether every request carries a ticket and is asked again on a new connection
    #: when a reset cuts it off (see `_request`): for kinds whose service
    #: ``answers_again`` every request (a lock's waits, a pipe's ``recv``).
    _asks_again = False

    def __init__(self, service: Service, kind: bytes) -> None:
        hub = _runtime.hub()
        self._name = kind + secrets.token_hex(8).encode()
        self._address = hub.address
        hub.register(self._name, service)
        self._shared = [False]
        self._finalizer: Optional[weakref.finalize[..., Handle]] = weakref.finalize(
            self, _unregister, hub, self._name, self._shared)

    @property
    def hub_address(self) -> str:
        """The address of the hub that serves the object (the creator's)."""
        return self._address

    @property
    def service_name(self) -> bytes:
        """The name of the object's service on that hub."""
        return self._name

    def __getstate__(self) -> Tuple[Any, ...]:  # subclasses add to it
        shared = self.__dict__.get("_shared")
        if shared is not None:
            shared[0] = True
        if _for_a_stdlib_child():
            # A multiprocessing child has no job environment to inherit the program's
            # secret from: it travels with the object, in the data multiprocessing sends
            # its child privately (over a pipe), as multiprocessing's own authkey does.
            return (self._name, self._address, auth.program_secret())
        return (self._name, self._address)

    def __setstate__(self, state: Tuple[Any, ...]) -> None:
        self._name, self._address = state[0], state[1]
        if len(state) > 2:
            auth.adopt_secret(state[2])
        self._finalizer = None

    def _request(self, op: bytes, frames: Sequence[Frame] = (),
                 on_late: Optional[LateReply] = None,
                 again: Optional[bool] = None,
                 withdraw: bytes = b"") -> Tuple[bytes, List[Frame]]:
        """Send ``op`` and return ``(status, frames)``; ``err`` replies are raised here.
        ``on_late`` and ``withdraw``: as `fiber.transport.client.Client.request`'s.

        A first call to the server connects within the connect timeout, not within the
        call's own timeout (which its frames carry, and the server keeps): a server paused
        for a moment (its process stopped, or in a long call that holds the GIL) answers
        late, it is not gone.

        With ``again`` (for a service that ``answers_again``), the request carries a
        ticket, and is asked again on a new connection if its connection fails under it:
        it is served once, and answered even if its first answer was lost in a reset.
        None: the kind's own rule (`_asks_again`).
        """
        try:
            client = get_client(self._address)
            if client.may_reset and (self._asks_again if again is None else again):
                asked = receipts.ticket()
                status, payload = again_on_a_new_connection(
                    lambda: get_client(self._address).request(
                        self._name, op, frames, on_late=on_late, ticket=asked,
                        withdraw=withdraw))
            else:  # (this process's own hub, or a Unix socket: no reset to outlive)
                status, payload = client.request(self._name, op, frames, on_late=on_late,
                                                 withdraw=withdraw)
        except ConnectionLost as e:
            raise self._lost(e) from e
        return self._checked(status, payload)

    def _checked(self, status: bytes, payload: List[Frame]) -> Tuple[bytes, List[Frame]]:
        """A reply as it came, unless it is an error (``err``), which is raised here."""
        if status == b"err":  # raised by this process's own hub: not a remote error
            hub = _runtime.hub_if_started()
            raise unpack_exception(loads(payload),
                                   local=hub is not None and hub.address == self._address)
        return status, payload

    def _send(self, op: bytes, frames: Sequence[Frame] = ()) -> None:
        """Send ``op``, which gets no reply (a put, a pipe's send). A connection that
        fails under it did not deliver it whole: it goes on a new connection, after what
        the failed one lost (see `fiber.transport._resend`). The connection is noted as
        one whose server has yet to serve it: a job's end waits for that (see
        `fiber.transport.client.sync_unanswered`)."""
        try:
            client = get_client(self._address)
            if client.may_reset:
                client = again_on_a_new_connection(lambda: self._send_on(op, frames))
            else:  # (this process's own hub, or a Unix socket: no reset to outlive)
                client.send(self._name, op, frames)
        except ConnectionLost as e:
            raise self._lost(e) from e
        if isinstance(client, Client):  # (not this process's own hub: served at once)
            client.sent_unanswered()

    def _send_on(self, op: bytes, frames: Sequence[Frame]) -> Channel:
        """Send ``op`` on this thread's connection to the server; that connection."""
        client = get_client(self._address)
        client.send(self._name, op, frames)
        return client

    def _lost(self, e: ConnectionLost) -> BaseException:
        """The error a lost server means for this kind of object (overridden by Pipe)."""
        return e


def _for_a_stdlib_child() -> bool:
    """Whether this pickle is the preparation data of a ``multiprocessing`` spawn or
    forkserver child (not of a fiber job, which fiber's own code may pickle so too)."""
    popen = mp_context.get_spawning_popen()
    return popen is not None and type(popen).__module__.startswith("multiprocessing.")


def _unregister(hub: Server, name: bytes, shared: List[bool]) -> None:
    if not shared[0] and hub.alive and _runtime.hub_if_started() is hub:
        try:
            hub.unregister(name)
        except Exception:
            pass


# -- handoffs: objects pickled into a job's payload, released if the job never takes them --

# This thread's collected release callbacks: ``here.transport.handoffs`` (.sink).


@contextlib.contextmanager
def collecting_handoffs() -> Iterator[List[Callable[[], None]]]:
    """Collect the release callbacks of objects pickled inside this block."""
    handoffs = here.transport.handoffs
    previous = getattr(handoffs, "sink", None)
    sink: List[Callable[[], None]] = []
    handoffs.sink = sink
    try:
        yield sink
    finally:
        handoffs.sink = previous


@contextlib.contextmanager
def probing() -> Iterator[None]:
    """A block whose pickles hand nothing over (pickled to find what cannot be pickled):
    whatever they registered is released at its end."""
    with collecting_handoffs() as handoffs:
        yield
    for release in handoffs:
        try:
            release()
        except Exception:
            pass


def add_handoff(release: Callable[[], None]) -> bool:
    """Register ``release`` with the enclosing ``collecting_handoffs``; False if none."""
    sink = getattr(here.transport.handoffs, "sink", None)
    if sink is None:
        return False
    sink.append(release)
    return True
