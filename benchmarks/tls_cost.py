"""What TLS costs a program across hosts: the same pool with ``tls`` off and ``auto``
(TLS between hosts) in one run, its workers on netns hosts (one network namespace a
host, root only), its master in the root namespace.

Each mode runs in a fresh master (a program's TLS is chosen at its start), alternating,
``--runs`` times each; printed: medians, their ratio, and the difference of round trips:

- **round trip**: one ``pool.apply`` of a no-op at a time (µs, the median of 2,000);
- **no-op throughput**: ``pool.map`` of 20,000 no-ops, chunksize 1 (tasks a second);
- **10 MB**: a 10 MB ``bytes`` argument echoed back by ``pool.apply`` (GB/s counting both
  ways, the best of 5); and a 10 MB numpy array (pickled out of band: no copy into the
  pickle, and none out of it), when numpy is installed.

The ES example's iteration time is `es_hosts.py`'s, with ``FIBER_TLS`` set alike.

``--handshakes N`` measures instead what accepting a connection costs a master: a
`Server` in this process (its hub thread), ``N`` `Client`s connected one after another
from a process on a netns host and kept open (TCP, TLS's mutual EC P-256 handshake,
fiber's own), ``off`` against ``auto``; printed: the process's CPU (ms) a connection.

    python benchmarks/tls_cost.py [--runs 3] [--hosts 2] [--workers 4] [--handshakes N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
#: The checkout's tests/: fiber_ci, the netns test hosts (not in the package)
TESTS = os.path.join(os.path.dirname(HERE), "tests")


def echo(x):  # type: ignore[no-untyped-def]
    return x


def noop(_=None):  # type: ignore[no-untyped-def]
    return None


def _echo_gb_s(pool, value) -> float:  # type: ignore[no-untyped-def]
    """GB/s of ``value`` echoed by a worker (both ways counted), the best of 5."""
    pool.apply(echo, (value,))
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        back = pool.apply(echo, (value,))
        best = min(best, time.perf_counter() - t)
        assert bytes(back) == bytes(value)
    return 2 * len(value) / best / 1e9


def child(workers: int) -> None:
    sys.path.insert(0, TESTS)
    import fiber

    import fiber_ci.netns  # noqa: F401 - registers the netns backend

    out = {}
    with fiber.Pool(workers) as pool:
        pool.map(noop, range(200))
        times = []
        for _ in range(2000):
            t = time.perf_counter()
            pool.apply(noop)
            times.append(time.perf_counter() - t)
        out["rt_us"] = statistics.median(times) * 1e6
        t = time.perf_counter()
        pool.map(noop, range(20000), chunksize=1)
        out["noop_per_s"] = 20000 / (time.perf_counter() - t)
        blob = os.urandom(10 << 20)
        out["gb_s"] = _echo_gb_s(pool, blob)
        try:
            import numpy
        except ImportError:
            pass
        else:
            out["array_gb_s"] = _echo_gb_s(pool, numpy.frombuffer(blob, dtype=numpy.uint8))
        core = pool._core
        with core.hub.lock:
            conns = [c for c in core.hub._conns.values() if c.source]
            out["tls_share"] = sum(1 for c in conns if c.tls) / max(1, len(conns))
    print("RESULT " + json.dumps(out), flush=True)


def _settings(mode: str):  # type: ignore[no-untyped-def]
    import dataclasses

    from fiber.transport.settings import DEFAULTS
    return dataclasses.replace(DEFAULTS, tls=mode)  # type: ignore[type-var]


def handshake_clients(address: str, n: int) -> None:
    """(In a netns host.) ``n`` clients connected one after another, kept open until
    the server has read this process's line."""
    from fiber.transport import credentials
    from fiber.transport.client import Client

    credentials.prepare(_settings(os.environ["FIBER_TLS"]))
    t = time.perf_counter()
    clients = [Client(address) for _ in range(n)]
    print("RESULT " + json.dumps({"wall_ms": (time.perf_counter() - t) * 1e3 / n}),
          flush=True)
    sys.stdin.read()  # until the server is done counting
    for client in clients:
        client.close()


def handshake_server(mode: str, n: int, prefix: list, root_ip: str) -> dict:
    """(A fresh process.) A server's CPU (its hub thread: this process does nothing else
    meanwhile) for ``n`` connections accepted, and their wall time at the client."""
    from fiber.transport import auth, credentials
    from fiber.transport.server import Server

    settings = _settings(mode)
    credentials.prepare(settings)
    if mode != "off":
        credentials.server_context(settings)  # made once a program, not a connection
    env = dict(os.environ, FIBER_TLS=mode, **credentials.credentials_env(settings),
               **auth.secret_env())
    server = Server(root_ip, name="fiber-bench-handshakes")
    try:
        cpu = time.process_time()
        client = subprocess.Popen([*prefix, sys.executable, os.path.abspath(__file__),
                                   "--handshake-client", server.address, "--handshakes",
                                   str(n)], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert client.stdout is not None and client.stdin is not None
        line = client.stdout.readline()
        used = time.process_time() - cpu
        client.stdin.close()
        client.wait(timeout=60)
    finally:
        server.close()
    if not line.startswith("RESULT "):
        raise RuntimeError(f"the clients failed: {line!r}")
    return {"cpu_ms": used * 1e3 / n, **json.loads(line[7:])}


def handshakes(args: argparse.Namespace, hosts) -> None:  # type: ignore[no-untyped-def]
    figures: dict = {"off": [], "auto": []}
    for _ in range(args.runs):
        for mode in figures:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--handshake-server",
                                  mode, "--handshakes", str(args.handshakes), "--prefix",
                                  json.dumps(hosts.exec_prefix(1)), "--root-ip", hosts.root_ip],
                                 check=True, capture_output=True, text=True,
                                 timeout=600).stdout
            figures[mode].append(json.loads(out.splitlines()[-1]))
    print(f"a master accepting {args.handshakes} connections from a netns host, medians of "
          f"{args.runs} runs each")
    cpu = {}
    for mode, runs in figures.items():
        cpu[mode] = statistics.median(f["cpu_ms"] for f in runs)
        wall = statistics.median(f["wall_ms"] for f in runs)
        print(f"  {mode:4}  master CPU {cpu[mode]:6.2f} ms a connection, connect {wall:6.2f} "
              f"ms at the client")
    extra = cpu["auto"] - cpu["off"]
    how = "measured" if args.handshakes == 1024 else f"extrapolated from {args.handshakes}"
    print(f"  TLS adds {extra:.2f} ms of the master's CPU a connection: at 1,024 connections "
          f"(one a job) {extra * 1024 / 1e3:.2f} s, {how}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--handshakes", type=int, default=0,
                        help="measure N connections accepted instead")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--handshake-client", help=argparse.SUPPRESS)
    parser.add_argument("--handshake-server", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--root-ip", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.workers)
        return
    if args.handshake_client:
        handshake_clients(args.handshake_client, args.handshakes)
        return
    if args.handshake_server:
        out = handshake_server(args.handshake_server, args.handshakes,
                               json.loads(args.prefix), args.root_ip)
        print(json.dumps(out), flush=True)
        return
    sys.path.insert(0, TESTS)
    from fiber_ci import netns

    hosts = netns.Hosts(args.hosts).start()
    if args.handshakes:
        try:
            handshakes(args, hosts)
        finally:
            hosts.stop()
        return
    figures: dict = {"off": [], "auto": []}
    try:
        for _ in range(args.runs):
            for mode in figures:
                env = dict(os.environ, FIBER_TLS=mode, FIBER_BACKEND="netns",
                           **{netns.HOSTS_ENV: hosts.to_env()})
                out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                      "--workers", str(args.workers)], env=env, check=True,
                                     capture_output=True, text=True, timeout=600).stdout
                line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
                figures[mode].append(json.loads(line[7:]))
    finally:
        hosts.stop()
    print(f"tls off against auto: {args.workers} workers on {args.hosts} netns hosts, "
          f"medians of {args.runs} masters each")
    for key, label in (("rt_us", "round trip µs"), ("noop_per_s", "no-op tasks/s"),
                       ("gb_s", "10 MB echo GB/s"), ("array_gb_s", "10 MB array GB/s"),
                       ("tls_share", "TLS connections")):
        if any(key not in f for f in figures["off"] + figures["auto"]):
            continue
        off = statistics.median(f[key] for f in figures["off"])
        on = statistics.median(f[key] for f in figures["auto"])
        ratio = f"  (auto/off {on / off:.2f}x)" if off else ""
        print(f"  {label:18} off {off:10.2f}  auto {on:10.2f}{ratio}")
    rt = [statistics.median(f["rt_us"] for f in figures[m]) for m in figures]
    print(f"  round trip: auto adds {rt[1] - rt[0]:.1f} µs")


if __name__ == "__main__":
    main()
