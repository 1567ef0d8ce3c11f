"""The floor under `tls_cost.py`'s 10 MB echo: what the link between the root namespace
and a netns host carries with nothing of fiber's pool above it (root only).

A server in the root namespace (where a master listens) and a client in a netns host
(``ip netns exec``, as the netns backend starts a job), fresh processes, the same path
as `tls_cost.py`'s; for each, 10 MB sent by the client and echoed back (GB/s counting
both ways, the best of ``--reps``):

- **tcp**: plain sockets (``sendall``, ``recv_into`` a buffer of the message's size);
- **tls**: the same through ``ssl.SSLSocket`` (TLS 1.3, the program's throwaway
  EC P-256 credentials of `fiber.transport.credentials`, mutual);
- **fiber off / fiber tls**: fiber's transport alone, a `Server` and a `Client`, the
  client's request echoed by a service: framing, and with TLS its `TlsSocket`.

    python benchmarks/tls_bound.py [--runs 3] [--reps 10] [--mb 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from typing import Any, List

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.join(os.path.dirname(HERE), "tests")
KINDS = ("tcp", "tls", "fiber-off", "fiber-tls")


def _settings(tls: str) -> Any:
    from fiber.transport.settings import DEFAULTS
    return dataclasses.replace(DEFAULTS, tls=tls)  # type: ignore[type-var]


def _recv_exact(sock: Any, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise EOFError("the peer closed")
        got += n


def _raw_server(kind: str, size: int, reps: int) -> None:
    from fiber.transport import credentials

    settings = _settings("on")
    credentials.prepare(settings)
    env = {**credentials.credentials_env(settings)}
    with socket.create_server((os.environ["BOUND_ROOT_IP"], 0)) as listener:
        port = listener.getsockname()[1]
        cpu0 = time.process_time()
        client = _client(kind, f"{os.environ['BOUND_ROOT_IP']}:{port}", size, reps, env)
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if kind == "tls":
            sock = credentials.server_context(settings).wrap_socket(sock, server_side=True)
        buf = memoryview(bytearray(size))
        with sock:
            for _ in range(reps + 1):
                _recv_exact(sock, buf)
                sock.sendall(buf)
        _report(client, reps, cpu0)


def _report(client: Any, reps: int, cpu0: float) -> None:
    """The client's result with this process's CPU an echo added (the server's)."""
    out = client.communicate(timeout=600)[0]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[7:])
    result["server_cpu_ms"] = (time.process_time() - cpu0) * 1e3 / (reps + 1)
    print("RESULT " + json.dumps(result), flush=True)


def _fiber_server(kind: str, size: int, reps: int) -> None:
    from fiber.transport import auth, credentials
    from fiber.transport.server import Server, Service

    class Echo(Service):
        def handle(self, server: Any, peer: Any, op: bytes, req_id: bytes,
                   payload: List[Any]) -> None:
            server.reply(peer, req_id, b"ok", payload)

    settings = _settings("auto" if kind == "fiber-tls" else "off")
    credentials.prepare(settings)
    env = {**credentials.credentials_env(settings), **auth.secret_env()}
    server = Server(os.environ["BOUND_ROOT_IP"], name="fiber-bound")
    server.register(b"echo", Echo())
    try:
        cpu0 = time.process_time()
        client = _client(kind, server.address, size, reps, env)
        _report(client, reps, cpu0)
    finally:
        server.close()


def _client(kind: str, address: str, size: int, reps: int, env: dict) -> Any:
    argv = [*json.loads(os.environ["BOUND_PREFIX"]), sys.executable, os.path.abspath(__file__),
            "--client", kind, "--address", address, "--mb", str(size >> 20),
            "--reps", str(reps)]
    return subprocess.Popen(argv, env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)


def client(kind: str, address: str, size: int, reps: int) -> None:
    blob = os.urandom(size)
    times, cpu = [], []
    info = ""
    if kind.startswith("fiber"):
        from fiber.transport import credentials
        from fiber.transport.client import Client
        credentials.prepare(_settings("auto" if kind == "fiber-tls" else "off"))
        conn = Client(address)
        info = type(conn.sock).__name__
        for _ in range(reps + 1):
            t, c = time.perf_counter(), time.process_time()
            status, payload = conn.request(b"echo", b"x", [blob], timeout=60)
            times.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            assert status == b"ok" and len(payload[0]) == size
        conn.close()
    else:
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if kind == "tls":
            from fiber.transport import credentials
            settings = _settings("on")
            credentials.prepare(settings)
            sock = credentials.client_context(settings).wrap_socket(sock)
            info = f"{sock.version()} {sock.cipher()[0]}"  # type: ignore[attr-defined]
        buf = memoryview(bytearray(size))
        with sock:
            for _ in range(reps + 1):
                t, c = time.perf_counter(), time.process_time()
                sock.sendall(blob)
                _recv_exact(sock, buf)
                times.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
    best = min(times[1:])
    print("RESULT " + json.dumps({"gb_s": 2 * size / best / 1e9, "info": info,
                                  "client_cpu_ms": statistics.median(cpu[1:]) * 1e3}),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--client", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--server", choices=KINDS, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.mb << 20
    if args.client:
        client(args.client, args.address, size, args.reps)
        return
    if args.server:
        serve = _fiber_server if args.server.startswith("fiber") else _raw_server
        serve(args.server, size, args.reps)
        return
    sys.path.insert(0, TESTS)
    from fiber_ci import netns

    hosts = netns.Hosts(1).start()
    figures: dict = {kind: [] for kind in KINDS}
    info: dict = {}
    cpus: dict = {kind: [] for kind in KINDS}
    env = dict(os.environ, BOUND_ROOT_IP=hosts.root_ip,
               BOUND_PREFIX=json.dumps(hosts.exec_prefix(1)))
    try:
        for _ in range(args.runs):
            for kind in KINDS:
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--server",
                                      kind, "--mb", str(args.mb), "--reps", str(args.reps)],
                                     env=env, check=True, capture_output=True, text=True,
                                     timeout=900).stdout
                line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
                result = json.loads(line[7:])
                figures[kind].append(result["gb_s"])
                cpus[kind].append((result["client_cpu_ms"], result["server_cpu_ms"]))
                info[kind] = result["info"]
    finally:
        hosts.stop()
    print(f"{args.mb} MB echoed root namespace <-> netns host, GB/s both ways counted, "
          f"best of {args.reps}; median (min-max) of {args.runs} runs; CPU: medians")
    for kind in KINDS:
        values = figures[kind]
        client_ms = statistics.median(c for c, _ in cpus[kind])
        server_ms = statistics.median(s for _, s in cpus[kind])
        print(f"  {kind:10} {statistics.median(values):5.2f}  ({min(values):.2f}-"
              f"{max(values):.2f})  CPU ms an echo: client {client_ms:5.1f}, server "
              f"{server_ms:5.1f}  {info[kind]}")


if __name__ == "__main__":
    main()
