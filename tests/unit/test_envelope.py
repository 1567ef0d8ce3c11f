"""The transport's own messages as records: the handshake's (``fiber.transport.auth``),
each checked against the frames the wire has always carried, byte for byte, and against
messages that are not it."""

from __future__ import annotations

import socket
import struct

import pytest

from fiber.transport import auth
from fiber.transport.auth import Admitted, Challenge, ClientHello, ClientProof
from fiber.transport.framing import FrameReader, send_frames

NONCE = b"n" * auth.NONCE_BYTES

#: Records and the frames the transport sent before them, byte for byte.
LAYOUTS = [
    (ClientHello(NONCE, b"p" * 16, True), [b"\x00HELLO", b"fiber/1", NONCE, b"p" * 16, b"A"]),
    (ClientHello(NONCE, b"p" * 16, False), [b"\x00HELLO", b"fiber/1", NONCE, b"p" * 16, b"-"]),
    (Challenge(NONCE, b"proof", b"fiber-3"), [b"\x00CHAL", NONCE, b"proof", b"fiber-3"]),
    (ClientProof(b"proof"), [b"\x00AUTH", b"proof"]),
    (Admitted(7), [b"\x00OK", (7).to_bytes(8, "little")]),
    (Admitted(None), [b"\x00OK"]),
]


@pytest.mark.parametrize("record, frames", LAYOUTS, ids=lambda r: type(r).__name__)
def test_a_record_writes_the_frames_the_transport_sent(record, frames):
    assert record.frames() == frames


@pytest.mark.parametrize("record, frames", LAYOUTS, ids=lambda r: type(r).__name__)
def test_a_record_reads_its_frames_as_received(record, frames):
    a, b = socket.socketpair()
    try:
        send_frames(a, frames, unix=False)
        reader = FrameReader()
        while not reader.messages:
            assert reader.feed_from(b)
        assert type(record).decode(reader.messages.popleft()) == record
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("record, frames", [
    (ClientHello, [b"\x00HELLO", b"fiber/0", NONCE, b"p" * 16, b"A"]),  # another version
    (ClientHello, [b"\x00HELLO", b"fiber/1", NONCE[1:], b"p" * 16, b"A"]),  # a short nonce
    (ClientHello, [b"\x00HELLO", b"fiber/1", NONCE, b"p" * 15, b"A"]),  # not a process id
    (ClientHello, [b"\x00AUTH", b"proof"]),  # out of turn
    (ClientHello, []),
    (Challenge, [b"\x00CHAL", NONCE, b"proof"]),  # no server id
    (Challenge, [b"\x00DENY"]),
    (ClientProof, [b"\x00AUTH", b"proof", b"more"]),
    (Admitted, [b"\x00DENY"]),  # refused
    (Admitted, [b"\x00OK", struct.pack("<Q", 1), b"more"]),
    (Admitted, []),
])
def test_a_message_that_is_not_the_record_is_not_decoded(record, frames):
    with pytest.raises((ValueError, IndexError)):
        record.decode(frames)


def test_the_servers_side_of_the_handshake_speaks_in_records():
    """A `ServerHandshake` answers a `ClientHello` with a `Challenge` whose proof the
    client can check, then a right `ClientProof` with an admission, a wrong one with
    ``DENY``; a message out of turn ends the connection with no answer."""
    hs = auth.ServerHandshake()
    assert hs.step(ClientProof(b"x").frames(), b"fiber-1") == ([], False)  # out of turn
    hs = auth.ServerHandshake()
    reply, keep = hs.step(ClientHello(NONCE, b"p" * 16, True).frames(), b"fiber-1")
    chal = Challenge.decode(reply)
    assert keep and chal.server_id == b"fiber-1" and hs.anchor and hs.process_id == b"p" * 16
    assert auth.verify(auth.server_proof(NONCE, chal.nonce), chal.proof)
    wrong = auth.ServerHandshake()
    wrong.step(ClientHello(NONCE, b"p" * 16, False).frames(), b"fiber-1")
    assert wrong.step(ClientProof(b"\x00" * 32).frames(), b"fiber-1") == ([auth.DENY], False)
    reply, keep = hs.step(ClientProof(auth.client_proof(NONCE, chal.nonce)).frames(),
                          b"fiber-1")
    assert keep and hs.done and Admitted.decode(reply) == Admitted(None)
