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
from fiber.transport.framing import encode
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


class _AlteringRelay:
    """A TCP relay on 127.0.0.1 to ``target`` that passes bytes as they are until
    `alter` is set, then alters the next chunk towards the target (or, with
    ``towards_target`` False, from it): an on-path host that alters a stream after its
    handshakes. How (``how``): ``flip`` inverts one of its bytes; ``insert`` puts before
    it a message of fiber's framing, in the clear (what an attacker of a plain link
    would write); ``forge`` puts before it a TLS record of right framing and a made-up
    body; ``replay`` sends the chunk before it (whole records of this connection) again."""

    HOW = ("flip", "insert", "forge", "replay")

    def __init__(self, target: Tuple[str, int], towards_target: bool = True,
                 how: str = "flip") -> None:
        assert how in self.HOW
        self.target, self.towards_target, self.how = target, towards_target, how
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.alter = threading.Event()
        self.altered = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        client, _ = self.listener.accept()
        server = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(server, client, not self.towards_target),
                         daemon=True).start()
        self._pipe(client, server, self.towards_target)

    def _altered(self, data: bytearray, last: bytes) -> bytes:
        if self.how == "flip":
            data[len(data) // 2] ^= 0xFF
            return bytes(data)
        if self.how == "insert":
            return b"".join(encode([b"count", b"op", b"", b"inserted"])[0]) + data
        if self.how == "forge":  # application data, TLS 1.2 on the wire, 64 bytes
            return b"\x17\x03\x03\x00\x40" + os.urandom(64) + data
        return last + data  # replay

    def _pipe(self, src: socket.socket, dst: socket.socket, alter: bool) -> None:
        last = b""
        try:
            while True:
                data = bytearray(src.recv(65536))
                if not data:
                    break
                if alter and self.alter.is_set() and not self.altered.is_set():
                    out = self._altered(data, last)
                    self.altered.set()
                else:
                    out = last = bytes(data)
                dst.sendall(out)
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
                          towards_target: bool = True, how: str = "flip"
                          ) -> Tuple[_AlteringRelay, Client]:
    """A client of ``server`` whose connections go through an `_AlteringRelay`."""
    relay = _AlteringRelay(split_address(server.address), towards_target, how)
    monkeypatch.setattr(client_module, "connect", lambda address, timeout, unix=True:
                        socket.create_connection(("127.0.0.1", relay.port), timeout))
    return relay, Client(server.address)


@pytest.mark.parametrize("how", _AlteringRelay.HOW)
def test_a_stream_altered_after_the_handshake_is_dropped_unread_and_said(
        server: Server, capfd: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Bytes flipped, a plain fiber message or a forged record inserted, or a record
    replayed: the connection is dropped, nothing after the handshake's own is served
    but what came before the alteration, and the server says why."""
    counting = _Counting()
    server.register(b"count", counting)
    relay, client = _client_through_relay(server, monkeypatch, how=how)
    try:
        assert client.request(b"count", b"op", [b"before"], timeout=10)[0] == b"ok"
        relay.alter.set()
        with pytest.raises((ConnectionLost, TimeoutError)):
            client.request(b"count", b"op", [b"altered"], timeout=10)
        assert relay.altered.is_set()
    finally:
        client.close()
    # nothing of the altered stream was served: not the message after it, not the one
    # inserted, not the one replayed
    assert counting.served == [b"before"]
    wait_until(lambda: "the stream was altered" in capfd.readouterr().err, 10,
               message="the server said why it closed the connection")


def test_a_message_inserted_into_a_plain_stream_is_served(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The control of the test above: without TLS (``tls = "off"``, trusting the
    network), the same inserted message is served as the program's own. The relay's
    insertion is a real attack; TLS is what stops it."""
    tls.set_policy(None)
    plain = Server("127.0.0.1", name="fiber-test-plain")
    counting = _Counting()
    plain.register(b"count", counting)
    relay, client = _client_through_relay(plain, monkeypatch, how="insert")
    try:
        assert client.request(b"count", b"op", [b"before"], timeout=10)[0] == b"ok"
        relay.alter.set()
        assert client.request(b"count", b"op", [b"after"], timeout=10)[0] == b"ok"
        assert relay.altered.is_set()
    finally:
        client.close()
        plain.close()
    assert counting.served == [b"before", b"inserted", b"after"]


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
        relay.alter.set()
        with pytest.raises(ConnectionLost, match="the stream was altered"):
            client.request(b"echo", b"op", [b"x" * 1000], timeout=10)
        assert relay.altered.is_set() and client.lost
    finally:
        client.close()
    err = capfd.readouterr().err
    assert f"closed its connection to {server.address}: a TLS record failed its check" in err
    assert err.count("the stream was altered") == 1, err


def test_a_handshake_the_link_ends_is_made_again_on_a_new_connection(server: Server) -> None:
    """A link that ends a connection in its handshake (a lossy link's retransmissions
    run out, a reset): the client makes a new connection and authenticates on it, rather
    than failing the job that connects. Here a relay in front of the server ends the first
    connection once the client's TLS hello has come, and relays the second."""
    _, _, name = server.address.partition("/unix=")
    host, port = split_address(server.address)
    relay = socket.create_server(("127.0.0.1", 0))
    accepted: List[int] = []

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        with src, dst:
            while True:
                try:
                    data = src.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                dst.sendall(data)

    def serve() -> None:
        for n in range(2):
            conn, _ = relay.accept()
            accepted.append(n)
            if n == 0:
                conn.recv(1024)  # its TLS hello
                conn.close()
                continue
            upstream = socket.create_connection((host, port))
            threading.Thread(target=pipe, args=(conn, upstream), daemon=True).start()
            threading.Thread(target=pipe, args=(upstream, conn), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    client = Client(f"tcp://127.0.0.1:{relay.getsockname()[1]}/unix={name}", timeout=10)
    try:
        status, payload = client.request(b"echo", b"op", [b"after a second try"], timeout=10)
        assert status == b"ok" and bytes(payload[1]) == b"after a second try"
        assert accepted == [0, 1]
    finally:
        client.close()
        relay.close()
