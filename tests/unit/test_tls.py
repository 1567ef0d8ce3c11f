"""TLS on fiber's own connections (`fiber.transport.tls`): a real server and real clients
over TCP on 127.0.0.1 with ``tls = "on"``, the program's throwaway credentials
(`fiber.transport.credentials`) and another program's."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any, Iterator, List, Optional, Tuple

import pytest

from fiber.errors import AuthenticationError
from fiber.testing.conformance.support.waiting import wait_until
from fiber.transport import auth, credentials, tls
from fiber.transport import client as client_module
from fiber.transport.client import Client, ConnectionLost
from fiber.transport.server import Server, Service
from fiber.transport.settings import DEFAULTS
from fiber.transport.sockets import split_address


class _Echo(Service):
    def handle(self, server: Server, peer: Any, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        server.reply(peer, req_id, b"ok", [op, *payload])


def _policy(server: credentials.Credentials,
            client: Optional[credentials.Credentials] = None) -> tls.Policy:
    """A policy ``on`` whose server shows ``server``, its clients ``client`` (default:
    the same): this process's server and clients as processes of two programs."""
    mine = client or server
    return tls.Policy("on", lambda: credentials._made_context(True, None, server),
                      lambda: credentials._made_context(False, None, mine))


@pytest.fixture
def server() -> Iterator[Server]:
    tls.set_policy(_policy(credentials.program_credentials()))
    srv = Server("127.0.0.1", name="fiber-test-tls")
    srv.register(b"echo", _Echo())
    try:
        yield srv
    finally:
        srv.close()
        tls.set_policy(None)


def test_requests_of_every_size_cross_a_tls_connection_intact(server: Server) -> None:
    client = Client(server.address)
    try:
        assert isinstance(client.sock, tls.TlsSocket) and client.sock.family == socket.AF_INET
        for size in (0, 1, 100, 64 << 10, 300_000, 10 << 20):
            data = os.urandom(size)
            status, payload = client.request(b"echo", b"op", [data, b"tail"], timeout=30)
            assert status == b"ok" and bytes(payload[1]) == data and payload[2] == b"tail"
        for i in range(500):  # many small messages: records and reads interleave
            _, payload = client.request(b"echo", b"op", [str(i).encode()], timeout=10)
            assert bytes(payload[1]) == str(i).encode()
    finally:
        client.close()
    with server.lock:
        assert all(conn.tls for conn in server._conns.values() if conn.source)


def test_another_programs_certificate_is_refused_before_anything_is_read(server: Server) -> None:
    before = server.door.dropped
    tls.set_policy(_policy(credentials.program_credentials(), credentials.make_credentials()))
    with pytest.raises((AuthenticationError, ConnectionLost)):
        Client(server.address)
    wait_until(lambda: server.door.dropped > before, 10, message="the refusal counted")
    assert any("TLS handshake failed" in line for line in server.door.strangers.said)


def test_a_peer_with_the_secret_but_no_tls_is_refused(server: Server) -> None:
    """A process that proves the secret in the clear (fiber's handshake, no TLS) is
    refused by TLS before its first byte is taken as fiber's."""
    with socket.create_connection(split_address(server.address), timeout=10) as sock:
        from fiber.transport.framing import send_frames
        send_frames(sock, [auth.HELLO, auth.VERSION, auth.new_nonce(), b"x" * 16, b"-"])
        sock.settimeout(10)
        data = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
    assert auth.CHAL not in data  # no challenge: fiber's handshake never began


def test_a_tls_mode_decides_alike_at_both_ends() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        a = socket.create_connection(listener.getsockname())
        b, _ = listener.accept()
        with a, b:
            assert not tls.wanted(a, "auto") and not tls.wanted(b, "auto")
            assert tls.wanted(a, "on") and tls.wanted(b, "on")
            assert not tls.wanted(a, "off")
    left, right = socket.socketpair()
    with left, right:
        assert not tls.wanted(left, "on")  # a Unix socket never is
    assert DEFAULTS.tls == "off"


def test_a_wrong_mode_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="off, auto, on"):
        tls.Policy("yes", lambda: None, lambda: None)  # type: ignore[arg-type,return-value]


class _FlippingRelay:
    """A TCP relay on 127.0.0.1 to ``target`` that passes bytes as they are until
    `flip` is set, then inverts one byte of the next chunk towards the target (or, with
    ``towards_target`` False, from it): an on-path host that alters a stream after its
    handshakes."""

    def __init__(self, target: Tuple[str, int], towards_target: bool = True) -> None:
        self.target = target
        self.towards_target = towards_target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.flip = threading.Event()
        self.flipped = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        client, _ = self.listener.accept()
        server = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(server, client, not self.towards_target),
                         daemon=True).start()
        self._pipe(client, server, self.towards_target)

    def _pipe(self, src: socket.socket, dst: socket.socket, alter: bool) -> None:
        try:
            while True:
                data = bytearray(src.recv(65536))
                if not data:
                    break
                if alter and self.flip.is_set() and not self.flipped.is_set():
                    data[len(data) // 2] ^= 0xFF
                    self.flipped.set()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


class _Counting(_Echo):
    def __init__(self) -> None:
        self.served: List[bytes] = []

    def handle(self, server: Server, peer: Any, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        self.served.append(bytes(payload[0]))
        super().handle(server, peer, op, req_id, payload)


def _client_through_relay(server: Server, monkeypatch: pytest.MonkeyPatch,
                          towards_target: bool = True) -> Tuple[_FlippingRelay, Client]:
    """A client of ``server`` whose connections go through a `_FlippingRelay`."""
    relay = _FlippingRelay(split_address(server.address), towards_target)
    monkeypatch.setattr(client_module, "connect", lambda address, timeout, unix=True:
                        socket.create_connection(("127.0.0.1", relay.port), timeout))
    return relay, Client(server.address)


def test_a_stream_altered_after_the_handshake_is_dropped_unread_and_said(
        server: Server, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    counting = _Counting()
    server.register(b"count", counting)
    relay, client = _client_through_relay(server, monkeypatch)
    try:
        assert client.request(b"count", b"op", [b"before"], timeout=10)[0] == b"ok"
        relay.flip.set()
        with pytest.raises((ConnectionLost, TimeoutError)):
            client.request(b"count", b"op", [b"altered"], timeout=10)
        assert relay.flipped.is_set()
    finally:
        client.close()
    assert counting.served == [b"before"]  # nothing of the altered record was served
    wait_until(lambda: "the stream was altered" in capfd.readouterr().err, 10,
               message="the server said why it closed the connection")


def _tls_pair() -> Tuple[tls.TlsSocket, tls.TlsSocket, socket.socket]:
    """A client and a server `TlsSocket` over a socket pair, handshaken; and the client's
    raw socket, to write records of its own making."""
    policy = _policy(credentials.program_credentials())
    left, right = socket.socketpair()
    client = tls.TlsSocket(left, policy.context(server_side=False), server_side=False)
    server = tls.TlsSocket(right, policy.context(server_side=True), server_side=True)
    thread = threading.Thread(target=client.handshake, args=(10, "a pair"))
    thread.start()
    wait_until(server.handshake_step, 10, message="the server's handshake")
    thread.join(10)
    assert client.handshaken
    return client, server, left


def test_a_read_takes_every_whole_record_and_then_says_the_altered_one() -> None:
    """Three records (16 KB, 16 KB, the rest) arrive at once, the third altered: one read
    gives both whole records, and the next raises `tls.Altered` (the reader is told, by
    `pending`, to read again at once: nothing more may come on the socket)."""
    client, server, raw = _tls_pair()
    try:
        client.sendall(b"x" * 40000)
        right = server.sock
        records = bytearray()
        while len(records) < 40000 + 3 * 22:  # each record: a header and a tag
            records += right.recv(65536)
        records[-20] ^= 0xFF
        raw.sendall(records)
        view = memoryview(bytearray(65536))
        assert server.recv_into(view) == 32768 and bytes(view[:32768]) == b"x" * 32768
        assert server.pending()
        with pytest.raises(tls.Altered, match="the stream was altered"):
            server.recv_into(view)
    finally:
        client.close()
        server.close()


def test_a_stream_altered_towards_a_client_ends_its_connection_and_is_said(
        server: Server, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The reply's record altered: the client, which read it, says so and counts its
    connection lost (it connects again on its next call); nothing of it is returned."""
    server.register(b"echo", _Echo())
    relay, client = _client_through_relay(server, monkeypatch, towards_target=False)
    try:
        assert client.request(b"echo", b"op", [b"before"], timeout=10)[0] == b"ok"
        relay.flip.set()
        with pytest.raises(ConnectionLost, match="the stream was altered"):
            client.request(b"echo", b"op", [b"x" * 1000], timeout=10)
        assert relay.flipped.is_set() and client.lost
    finally:
        client.close()
    err = capfd.readouterr().err
    assert f"closed its connection to {server.address}: a TLS record failed its check" in err
    assert err.count("the stream was altered") == 1, err
