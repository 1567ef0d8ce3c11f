"""What TLS 1.3 would cost a fiber link, before fiber has it (issue 48; see
docs/contributing/tls.md): a ping-pong over loopback TCP between two processes, plain
against TLS 1.3 with mutual certificates (an EC P-256 authority and one leaf, made with
the ``openssl`` command in a temporary directory), through Python's ``ssl``, in one run.

Prints, for each (two runs each, alternating): connect and handshake, a 64-byte round
trip, and 10 MB sent with one acknowledgement (GB/s). Not fiber's transport: the floor
under what a TLS transport in Python can do here.

Usage::

    python benchmarks/tls_probe.py
"""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import tempfile
import time

N_RTT, MB, REPS = 5000, 10, 20


def make_credentials(where: str) -> None:
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=where, check=True, capture_output=True)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=fiber-program-ca")
    run("req", *ec, "-keyout", "peer.key", "-out", "peer.csr", "-subj", "/CN=fiber-peer")
    run("x509", "-req", "-in", "peer.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "peer.pem", "-days", "1")


def context(where: str, server: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(os.path.join(where, "peer.pem"), os.path.join(where, "peer.key"))
    ctx.load_verify_locations(os.path.join(where, "ca.pem"))
    ctx.verify_mode = ssl.CERT_REQUIRED  # mutual: the server asks the client's too
    ctx.check_hostname = False
    return ctx


def recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise EOFError("the peer closed")
        got += k


def serve(listener: socket.socket, where: str, tls: bool) -> None:
    sock, _ = listener.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        sock = context(where, True).wrap_socket(sock, server_side=True)
    small = bytearray(64)
    for _ in range(N_RTT):
        recv_exact(sock, 64, small)
        sock.sendall(small)
    big = bytearray(MB << 20)
    for _ in range(REPS):
        recv_exact(sock, MB << 20, big)
        sock.sendall(b"k")
    sock.close()


def measure(where: str, tls: bool) -> str:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    address = listener.getsockname()
    pid = os.fork()
    if pid == 0:
        try:
            serve(listener, where, tls)
        finally:
            os._exit(0)
    listener.close()
    started = time.perf_counter()
    sock = socket.create_connection(address)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls:
        sock = context(where, False).wrap_socket(sock)
    handshake = time.perf_counter() - started
    small, one = bytearray(64), bytearray(1)
    started = time.perf_counter()
    for _ in range(N_RTT):
        sock.sendall(small)
        recv_exact(sock, 64, small)
    rtt = (time.perf_counter() - started) / N_RTT
    data = bytes(MB << 20)
    started = time.perf_counter()
    for _ in range(REPS):
        sock.sendall(data)
        recv_exact(sock, 1, one)
    rate = REPS * MB / 1024 / (time.perf_counter() - started)
    suite = sock.cipher() if isinstance(sock, ssl.SSLSocket) else None
    cipher = suite[0] if suite else ""
    sock.close()
    os.waitpid(pid, 0)
    return (f"{'TLS 1.3' if tls else 'plain'}: connect and handshake {handshake * 1e3:.2f} ms, "
            f"64 B round trip {rtt * 1e6:.1f} us, {MB} MB at {rate:.2f} GB/s {cipher}")


def main() -> None:
    with tempfile.TemporaryDirectory() as where:
        make_credentials(where)
        for tls in (False, True, False, True):
            print(measure(where, tls), flush=True)


if __name__ == "__main__":
    main()
