"""The program secret and the challenge-response that proves a peer holds it: mutual, on
every new connection, before anything is unpickled. The handshake:
docs/contributing/transport.md, "Authentication"."""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from typing import Dict, List, Sequence, Tuple

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

    def step(self, frames: Sequence[Frame], server_id: bytes) -> Tuple[List[bytes], bool]:
        """The reply to the client's message ``frames`` (none: send nothing), and whether
        to keep the connection (False: close it, after the reply)."""
        if self.state == "hello":
            if (len(frames) != 5 or frames[0] != HELLO or frames[1] != VERSION
                    or len(frames[2]) != NONCE_BYTES or len(frames[3]) != 16):
                return [], False
            self.cnonce, self.process_id = bytes(frames[2]), bytes(frames[3])
            self.anchor = frames[4] == b"A"
            self.snonce = new_nonce()
            self.state = "auth"
            return [CHAL, self.snonce, server_proof(self.cnonce, self.snonce), server_id], True
        if self.state == "auth":
            if len(frames) != 2 or frames[0] != AUTH:
                return [], False
            if not verify(client_proof(self.cnonce, self.snonce), bytes(frames[1])):
                return [DENY], False
            self.state = "ready"
            return [OK], True
        return [], False
