"""What a pool across hosts costs its master, per worker: the numbers of the scale notes.

Two set-ups, each a fresh master interpreter with one pool, all workers connected first:

- ``netns``: ``fiber.Pool(N)`` on the netns backend over H network-namespace hosts (root);
- ``slurm``: ``fiber.Pool(N)`` as one job array on the Slurm test cluster
  (``scripts/slurm-cluster.sh start 3``; partition ``wide``, oversubscribed).

Measured: the master's CPU from ``Pool(N)`` until all workers connected, per worker
(on netns it includes starting each job's ``ip netns exec`` subprocess); then, with the
pool connected and idle for ``--idle`` seconds:

- the master's resident memory and open descriptors (by kind), less before the pool;
- its TCP connections to workers, and the segments and bytes on them per worker and
  second (``ss -ti``: the master's own counters, keepalive probes and their ACKs
  included; nothing else is sent while the pool idles);
- its CPU meanwhile (the hub thread; the kernel answers keepalives);
- on Slurm, the status polls: ``squeue`` calls made by the backend's watcher and their
  duration, then 20 calls of the same ``squeue`` back to back (duration, output size) and
  slurmctld's own count and time of the job-info RPCs they cost (``sdiag``);

and the master's CPU per task of a map of 2 tasks per worker (chunksize 1).

Usage (root)::

    python benchmarks/cross_host_costs.py netns [--workers 256] [--hosts 4]
    scripts/slurm-cluster.sh start 3 && eval "$(scripts/slurm-cluster.sh env)"
    python benchmarks/cross_host_costs.py slurm [--workers 128]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
#: The checkout's tests/: fiber_ci, the netns test hosts (not in the package)
TESTS = os.path.join(os.path.dirname(HERE), "tests")


def nap(x: int) -> int:
    return x


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def fd_kinds() -> Dict[str, int]:
    kinds: Dict[str, int] = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        kinds[target.split(":", 1)[0] if ":" in target else "file"] += 1
    return dict(kinds)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def tcp_counters(port: int) -> Tuple[int, int, int, int, int]:
    """(connections, segs_in, segs_out, bytes_received, bytes_sent) summed over the
    established connections of the master's listening ``port``."""
    out = subprocess.run(["ss", "-tin", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, timeout=30).stdout
    conns = seg_in = seg_out = b_in = b_out = 0
    for line in out.splitlines():
        if "segs_in:" not in line:
            continue
        conns += 1
        fields = dict(re.findall(r"(\w+):(\d+)", line))
        seg_in += int(fields.get("segs_in", 0))
        seg_out += int(fields.get("segs_out", 0))
        b_in += int(fields.get("bytes_received", 0))
        b_out += int(fields.get("bytes_sent", 0))
    return conns, seg_in, seg_out, b_in, b_out


def connected(pool: Any) -> int:
    core = pool._core
    with core.hub.lock:
        return sum(1 for ws in core.live_workers() if ws.connected)


def wait_connected(pool: Any, n: int, timeout: float) -> float:
    t0 = time.monotonic()
    while connected(pool) < n:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"only {connected(pool)} of {n} workers connected in {timeout} s")
        time.sleep(0.2)
    return time.monotonic() - t0


def measure_pool(pool: Any, n: int, idle: float, start_timeout: float,
                 before: Dict[str, Any]) -> Dict[str, Any]:
    """Connect, settle, idle: the master's costs (the caller made the pool)."""
    t0 = time.monotonic()
    out: Dict[str, Any] = {"workers": n}
    out["connect_s"] = round(wait_connected(pool, n, start_timeout) + before["made_s"], 1)
    out["startup_cpu_ms_per_worker"] = round((cpu_s() - before["cpu_s"]) * 1000 / n, 2)
    time.sleep(3)  # the last handshakes' timers, the watcher's first polls
    kinds = fd_kinds()
    out["rss_kb_per_worker"] = round((rss_kb() - before["rss_kb"]) / n, 1)
    out["fds_per_worker"] = {k: round((v - before["fds"].get(k, 0)) / n, 2)
                             for k, v in kinds.items()}
    port = int(pool._core.hub.address.split("/unix=")[0].rsplit(":", 1)[1])
    c0, cpu0, t1 = tcp_counters(port), cpu_s(), time.monotonic()
    time.sleep(idle)
    c1, cpu1, t2 = tcp_counters(port), cpu_s(), time.monotonic()
    span = (t2 - t1) * n
    out["tcp_connections_per_worker"] = round(c1[0] / n, 2)
    out["idle_segments_in_per_worker_s"] = round((c1[1] - c0[1]) / span, 2)
    out["idle_segments_out_per_worker_s"] = round((c1[2] - c0[2]) / span, 2)
    out["idle_payload_bytes_per_worker_s"] = round((c1[3] - c0[3] + c1[4] - c0[4]) / span, 2)
    out["idle_cpu_ms_per_s"] = round((cpu1 - cpu0) * 1000 / (t2 - t1), 2)
    cpu0 = cpu_s()
    result = pool.map(nap, range(2 * n), chunksize=1)
    assert result == list(range(2 * n))
    out["cpu_ms_per_task"] = round((cpu_s() - cpu0) * 1000 / (2 * n), 3)
    out["measured_s"] = round(time.monotonic() - t0, 1)
    return out


# -- netns --------------------------------------------------------------------------------


def run_netns(args: argparse.Namespace) -> Dict[str, Any]:
    sys.path[:0] = [os.path.join(os.path.dirname(HERE), "src"), TESTS]
    from fiber_ci import netns

    hosts = netns.Hosts(args.hosts).start()
    try:
        env = dict(os.environ, **{netns.HOSTS_ENV: hosts.to_env(), "PYTHONUNBUFFERED": "1"})
        cp = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "netns",
                             "--workers", str(args.workers), "--idle", str(args.idle)],
                            env=env, capture_output=True, text=True, timeout=1800)
    finally:
        hosts.stop()
    return _result(cp)


def child_netns(args: argparse.Namespace) -> Dict[str, Any]:
    sys.path.insert(0, TESTS)
    import fiber

    from fiber_ci import netns

    fiber.init(backend="netns")
    before = {"rss_kb": rss_kb(), "fds": fd_kinds(), "cpu_s": cpu_s()}
    t0 = time.monotonic()
    with fiber.Pool(args.workers) as pool:
        before["made_s"] = time.monotonic() - t0
        out = measure_pool(pool, args.workers, args.idle, 900, before)
        out["hosts"] = len(netns.current_hosts().hosts)  # type: ignore[union-attr]
    return out


# -- slurm --------------------------------------------------------------------------------


def sdiag_job_info() -> Tuple[int, int]:
    """slurmctld's (count, total microseconds) of job-info RPCs so far: REQUEST_JOB_INFO
    (all jobs: squeue with several job ids, or none) and REQUEST_JOB_INFO_SINGLE (squeue
    with one job id: that job, or that array's tasks)."""
    out = subprocess.run(["sdiag"], capture_output=True, text=True, timeout=30).stdout
    count = total = 0
    for m in re.finditer(r"REQUEST_JOB_INFO(?:_SINGLE)?\s*\(\s*\d+\)\s*count:(\d+)\s+"
                         r"ave_time:\d+\s+total_time:(\d+)", out):
        count, total = count + int(m.group(1)), total + int(m.group(2))
    return count, total


def run_slurm(args: argparse.Namespace) -> Dict[str, Any]:
    if not os.environ.get("SLURM_CONF"):
        sys.exit('SLURM_CONF is not set: eval "$(scripts/slurm-cluster.sh env)" first')
    env = dict(os.environ, FIBER_LISTEN_HOST=os.environ.get("FIBER_SLURM_DRIVER_ADDR",
                                                             "10.201.0.1"))
    cp = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "slurm",
                         "--workers", str(args.workers), "--idle", str(args.idle)],
                        env=env, capture_output=True, text=True, timeout=1800)
    return _result(cp)


def child_slurm(args: argparse.Namespace) -> Dict[str, Any]:
    import fiber
    from fiber.backends import get_backend

    fiber.init(backend="slurm", slurm_partition="wide",
               listen_host=os.environ["FIBER_LISTEN_HOST"])
    backend = get_backend("slurm")
    calls: List[Tuple[float, List[str], float, int]] = []
    run = backend.run_command

    def timed(argv: Any, **kw: Any) -> Any:
        t = time.monotonic()
        cp = run(argv, **kw)
        calls.append((t, list(argv), time.monotonic() - t, len(cp.stdout or "")))
        return cp

    backend.run_command = timed  # type: ignore[method-assign]
    before = {"rss_kb": rss_kb(), "fds": fd_kinds(), "cpu_s": cpu_s()}
    t0 = time.monotonic()
    with fiber.Pool(args.workers) as pool:
        before["made_s"] = time.monotonic() - t0
        out = measure_pool(pool, args.workers, args.idle, 900, before)
        polls = [(t, d, size) for t, argv, d, size in calls if argv[0] == "squeue"]
        window = [p for p in polls if p[0] >= polls[-1][0] - args.idle]
        out["watcher_squeue_per_s"] = round(len(window) / args.idle, 2)
        out["watcher_squeue_ms_median"] = round(
            1000 * statistics.median(d for _, d, _ in polls), 1)
        argv = next(argv for _, argv, _, _ in reversed(calls) if argv[0] == "squeue")
        info0 = sdiag_job_info()
        took, size = [], 0
        for _ in range(20):
            t = time.monotonic()
            cp = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            took.append(time.monotonic() - t)
            size = len(cp.stdout)
        info1 = sdiag_job_info()
        out["squeue_ms_median"] = round(1000 * statistics.median(took), 1)
        out["squeue_output_bytes"] = size
        rpcs = info1[0] - info0[0]
        out["slurmctld_rpcs_per_squeue"] = round(rpcs / 20, 2)
        out["slurmctld_ms_per_squeue"] = round((info1[1] - info0[1]) / 1000 / 20, 2)
        out["nodes"] = sorted({ws.process._job.handle.host
                               for ws in pool._core.live_workers()})
    return out


def _result(cp: subprocess.CompletedProcess) -> Dict[str, Any]:
    lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT ")]
    if cp.returncode != 0 or not lines:
        sys.exit(f"the measurement failed (exit {cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
    return json.loads(lines[-1][len("RESULT "):])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("where", choices=["netns", "slurm"])
    ap.add_argument("--workers", type=int, default=0, help="256 on netns, 128 on slurm")
    ap.add_argument("--hosts", type=int, default=4, help="netns hosts (default 4)")
    ap.add_argument("--idle", type=float, default=20.0, help="seconds measured idle")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.workers = args.workers or (256 if args.where == "netns" else 128)
    if args.child:
        fn = child_netns if args.where == "netns" else child_slurm
        print("RESULT " + json.dumps(fn(args)), flush=True)
        return
    out = run_netns(args) if args.where == "netns" else run_slurm(args)
    print(f"fiber.Pool({args.workers}) on {args.where}; this machine: "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for key, value in out.items():
        print(f"  {key:36} {value}")


if __name__ == "__main__":
    main()
