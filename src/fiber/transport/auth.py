"""The program secret and the challenge-response that proves a peer holds it: mutual, on
every new connection, before anything is unpickled. The handshake:
docs/contributing/transport.md, "Authentication"."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from .._process_state import here
from ..errors import AuthenticationError
from .serialization import Frame

__all__ = [
    "program_secret",
    "server_proof",
    "client_proof",
    "verify",
    "new_nonce",
    "HELLO",
    "CHAL",
    "AUTH",
    "OK",
    "DENY",
    "VERSION",
    "NONCE_BYTES",
    "ServerHandshake",
    "ClientHello",
    "Challenge",
    "ClientProof",
    "Admitted",
]

SECRET_ENV = "FIBER_SECRET"
VERSION = b"fiber/1"
NONCE_BYTES = 32

HELLO = b"\x00HELLO"
CHAL = b"\x00CHAL"
AUTH = b"\x00AUTH"
OK = b"\x00OK"
DENY = b"\x00DENY"


def program_secret() -> bytes:
    """This program's secret: inherited from the parent job, or made here on first use
    (kept in ``here.transport.secret``)."""
    state = here.transport
    with state.secret_lock:
        if state.secret is None:
            inherited = os.environ.pop(SECRET_ENV, None)
            state.secret = bytes.fromhex(inherited) if inherited else secrets.token_bytes(32)
        return state.secret


def adopt_secret(secret: bytes) -> None:
    """Take ``secret`` as this process's program secret: a standard-library
    ``multiprocessing`` child that received a fiber object (see `fiber._core._served`),
    which has no job environment to inherit it from.

    Raises:
        AuthenticationError: this process already holds another program's secret.
    """
    state = here.transport
    with state.secret_lock:
        if state.secret is None:
            os.environ.pop(SECRET_ENV, None)
            state.secret = secret
        elif not hmac.compare_digest(state.secret, secret):
            raise AuthenticationError(
                "this process already belongs to another fiber program: a fiber object "
                "can only be used by processes of the program that created it")


def secret_env() -> Dict[str, str]:
    """The environment entry that hands the secret to a child job."""
    return {SECRET_ENV: program_secret().hex()}


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def _mac(*parts: bytes) -> bytes:
    return hmac.new(program_secret(), b"|".join(parts), hashlib.sha256).digest()


def server_proof(client_nonce: bytes, server_nonce: bytes) -> bytes:
    return _mac(b"S", client_nonce, server_nonce)


def client_proof(client_nonce: bytes, server_nonce: bytes) -> bytes:
    return _mac(b"C", server_nonce, client_nonce)


def verify(expected: bytes, given: bytes) -> bool:
    return hmac.compare_digest(expected, given)


# -- the handshake's messages, as records (see fiber.transport.operations.Record) -------
# (each `decode` raises ValueError or IndexError on a message that is not it: the server
# closes the connection, the client raises AuthenticationError)

def _expect(frames: Sequence[Frame], tag: bytes, count: int) -> None:
    if len(frames) != count or frames[0] != tag:
        raise ValueError(f"not a {tag!r} message of {count} frames")


def _nonce(frame: Frame) -> bytes:
    if len(frame) != NONCE_BYTES:
        raise ValueError(f"a nonce of {NONCE_BYTES} bytes, not {len(frame)}")
    return bytes(frame)


class ClientHello(NamedTuple):
    """The client's first message: the protocol's version, its nonce, its process id (16
    bytes), and whether the connection is its process's anchor to this server."""

    nonce: bytes
    process_id: bytes
    anchor: bool

    @classmethod
    def decode(cls, frames: Sequence[Frame]) -> ClientHello:
        _expect(frames, HELLO, 5)
        if frames[1] != VERSION or len(frames[3]) != 16:
            raise ValueError("another protocol's version, or not a process id")
        return cls(_nonce(frames[2]), bytes(frames[3]), frames[4] == b"A")

    def frames(self) -> List[Frame]:
        return [HELLO, VERSION, self.nonce, self.process_id, b"A" if self.anchor else b"-"]


class Challenge(NamedTuple):
    """The server's answer to a `ClientHello`: its nonce, its proof of the secret (over
    both nonces), and its id (`fiber.transport.sockets.server_id`: which server of the
    program listens at the address)."""

    nonce: bytes
    proof: bytes
    server_id: bytes

    @classmethod
    def decode(cls, frames: Sequence[Frame]) -> Challenge:
        _expect(frames, CHAL, 4)
        return cls(_nonce(frames[1]), bytes(frames[2]), bytes(frames[3]))

    def frames(self) -> List[Frame]:
        return [CHAL, self.nonce, self.proof, self.server_id]


class ClientProof(NamedTuple):
    """The client's answer to a `Challenge`: its proof of the secret."""

    proof: bytes

    @classmethod
    def decode(cls, frames: Sequence[Frame]) -> ClientProof:
        _expect(frames, AUTH, 2)
        return cls(bytes(frames[1]))

    def frames(self) -> List[Frame]:
        return [AUTH, self.proof]


class Admitted(NamedTuple):
    """The server's answer to a right `ClientProof` (a wrong one is answered ``[DENY]``):
    the connection's peer id there (`fiber.transport._resend`), None if not said."""

    peer_id: Optional[int]

    @classmethod
    def decode(cls, frames: Sequence[Frame]) -> Admitted:
        if not frames or frames[0] != OK or len(frames) > 2:
            raise ValueError("not an admission")
        return cls(int.from_bytes(frames[1], "little") if len(frames) > 1 else None)

    def frames(self) -> List[Frame]:
        peer_id = self.peer_id
        return [OK] if peer_id is None else [OK, peer_id.to_bytes(8, "little")]


class ServerHandshake:
    """The server's side of one connection's handshake: each message the client sends
    gives the reply, and whether the connection may go on (nothing is unpickled)."""

    __slots__ = ("state", "cnonce", "snonce", "process_id", "anchor")

    def __init__(self) -> None:
        self.state = "hello"  # then "auth", then "ready"
        self.cnonce = self.snonce = self.process_id = b""
        self.anchor = False

    @property
    def done(self) -> bool:
        """Whether the client proved the secret (the connection is a peer now)."""
        return self.state == "ready"

    def step(self, frames: Sequence[Frame], server_id: bytes) -> Tuple[List[Frame], bool]:
        """The reply to the client's message ``frames`` (none: send nothing), and whether
        to keep the connection (False: close it, after the reply)."""
        if self.state == "hello":
            try:
                hello = ClientHello.decode(frames)
            except (ValueError, IndexError):
                return [], False
            self.cnonce, self.process_id, self.anchor = hello
            self.snonce = new_nonce()
            self.state = "auth"
            proof = server_proof(self.cnonce, self.snonce)
            return Challenge(self.snonce, proof, server_id).frames(), True
        if self.state == "auth":
            try:
                given = ClientProof.decode(frames).proof
            except (ValueError, IndexError):
                return [], False
            if not verify(client_proof(self.cnonce, self.snonce), given):
                return [DENY], False
            self.state = "ready"
            return Admitted(None).frames(), True  # (the server adds the peer's id)
        return [], False
