"""What TLS costs a program across hosts: the same pool with ``tls`` off and ``auto``
(TLS between hosts) in one run, its workers on netns hosts (one network namespace a
host, root only), its master in the root namespace.

Each mode runs in a fresh master (a program's TLS is chosen at its start), alternating,
``--runs`` times each; printed: medians, their ratio, and the difference of round trips:

- **round trip**: one ``pool.apply`` of a no-op at a time (µs, the median of 2,000);
- **no-op throughput**: ``pool.map`` of 20,000 no-ops, chunksize 1 (tasks a second);
- **10 MB**: a 10 MB ``bytes`` argument echoed back by ``pool.apply`` (GB/s counting both
  ways, the best of 5).

The ES example's iteration time is `es_hosts.py`'s, with ``FIBER_TLS`` set alike.

    python benchmarks/tls_cost.py [--runs 3] [--hosts 2] [--workers 4]
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
        pool.apply(echo, (blob,))
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            back = pool.apply(echo, (blob,))
            best = min(best, time.perf_counter() - t)
            assert back == blob
        out["gb_s"] = 2 * len(blob) / best / 1e9
        core = pool._core
        with core.hub.lock:
            conns = [c for c in core.hub._conns.values() if c.source]
            out["tls_share"] = sum(1 for c in conns if c.tls) / max(1, len(conns))
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.workers)
        return
    sys.path.insert(0, TESTS)
    from fiber_ci import netns

    hosts = netns.Hosts(args.hosts).start()
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
                       ("gb_s", "10 MB echo GB/s"), ("tls_share", "TLS connections")):
        off = statistics.median(f[key] for f in figures["off"])
        on = statistics.median(f[key] for f in figures["auto"])
        ratio = f"  (auto/off {on / off:.2f}x)" if off else ""
        print(f"  {label:18} off {off:10.2f}  auto {on:10.2f}{ratio}")
    rt = [statistics.median(f["rt_us"] for f in figures[m]) for m in figures]
    print(f"  round trip: auto adds {rt[1] - rt[0]:.1f} µs")


if __name__ == "__main__":
    main()
