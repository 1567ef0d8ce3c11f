"""A TCP relay on 127.0.0.1 that counts the bytes it passes and can cut its connections.

Put between a client and its server (a Kubernetes API server: its certificate names
127.0.0.1 on the test node), it measures what the client's requests cost on the wire,
TLS included, and cuts the client off (every connection closed; new ones refused until
allowed again) as a lost network would. One thread, closed by `TcpProxy.close`. And
`abort`: one connection of this process reset, as a middlebox's reset would.
"""

from __future__ import annotations

import selectors
import socket
import subprocess
import threading
from typing import Dict, Tuple

from fiber.testing.conformance.support.waiting import unusable

_CHUNK = 65536


def abort(sock: socket.socket) -> None:
    """Abort ``sock``'s TCP connection as a middlebox's reset would (``ss -K``: root, else
    the test is `unusable`)."""
    host, port = sock.getsockname()[:2]
    cp = subprocess.run(["ss", "-K", "src", host, "sport", "=", str(port)],
                        capture_output=True, text=True, timeout=30)
    if cp.returncode != 0 or "ESTAB" not in cp.stdout:
        unusable("ss -K (root)", f"cannot reset a connection: {cp.stderr or cp.stdout}")


class TcpProxy:
    """Relay connections to ``127.0.0.1:<port>`` to ``(host, port)``."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        #: Bytes from the server to clients, and from clients to the server.
        self.received = self.sent = 0
        #: Connections accepted and relayed, in all.
        self.connections = 0
        self._refusing = False
        self._peers: Dict[socket.socket, socket.socket] = {}
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel.register(self._listener, selectors.EVENT_READ)
        self._sel.register(self._wake_r, selectors.EVENT_READ)
        self._cut = self._closed = False
        self._done = threading.Condition(self._lock)
        self._cuts = 0  # cuts done
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._thread.start()

    def counts(self) -> Tuple[int, int, int]:
        """(bytes received from the server, bytes sent to it, connections so far)."""
        with self._lock:
            return self.received, self.sent, self.connections

    def cut(self, refuse: bool = True) -> None:
        """Close every connection (returns when they are closed); with ``refuse``, close
        new ones at once too, until `allow`."""
        with self._lock:
            self._cut, self._refusing = True, refuse
            done = self._cuts + 1
        self._wake_w.send(b"x")
        with self._done:
            self._done.wait_for(lambda: self._cuts >= done, timeout=10)

    def allow(self) -> None:
        """Relay new connections again."""
        with self._lock:
            self._refusing = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._wake_w.send(b"x")
        self._thread.join(timeout=10)

    def _drop(self, sock: socket.socket) -> None:
        peer = self._peers.pop(sock, None)
        for s in (sock, peer):
            if s is None:
                continue
            self._peers.pop(s, None)
            try:
                self._sel.unregister(s)
            except (KeyError, ValueError):
                pass
            s.close()

    def _accept(self) -> None:
        client, _ = self._listener.accept()
        with self._lock:
            refusing = self._refusing
        if refusing:
            client.close()
            return
        try:
            server = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        server.settimeout(None)
        self._peers[client], self._peers[server] = server, client
        self._sel.register(client, selectors.EVENT_READ, "up")
        self._sel.register(server, selectors.EVENT_READ, "down")
        with self._lock:
            self.connections += 1

    def _pass(self, sock: socket.socket, direction: str) -> None:
        try:
            data = sock.recv(_CHUNK)
        except OSError:
            data = b""
        with self._lock:  # counted before it is passed on: a reader never sees it first
            if direction == "down":
                self.received += len(data)
            else:
                self.sent += len(data)
        try:
            if data:
                self._peers[sock].sendall(data)
        except OSError:
            data = b""
        if not data:
            self._drop(sock)

    def _run(self) -> None:
        while True:
            for key, _ in self._sel.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._listener:
                    self._accept()
                elif sock is self._wake_r:
                    sock.recv(64)
                elif sock in self._peers:
                    self._pass(sock, str(key.data))
            with self._lock:
                cut, closed = self._cut or self._closed, self._closed
                self._cut = False
            if cut:
                for sock in list(self._peers):
                    self._drop(sock)
                with self._done:
                    self._cuts += 1
                    self._done.notify_all()
            if closed:
                for s in (self._listener, self._wake_r, self._wake_w):
                    s.close()
                self._sel.close()
                return
