"""The master at 1,000 to 50,000 workers: a SIMULATION with stand-in workers.

Real processes of that count do not fit this 2-CPU machine, so the workers are simulated
and the master is real:

- **real**: the master, through the public API (``fiber.get_context("standins").Pool(n)``,
  ``pool.map``), with everything behind it: its hub (one thread, epoll), the launch
  service, the pool's scheduler and pending tables, a ``Process`` and a job record per
  worker, the job watcher's polls; and the wire: one TCP connection a worker over
  loopback (from 127.0.1.x, as from other hosts), TCP keepalive as configured, fiber's
  handshake (HMAC of the program's secret), framing, pickles and pool protocol.
- **simulated**: the workers (`fiber_ci.standins`): a few stand-in processes, each
  serving thousands of simulated workers from one epoll loop. Each connects, proves the
  secret, fetches its launch payload, says hello, and runs each task it is sent as a
  timer of the task's length (``sleep_for(seconds)``: the length is read from the task's
  own pickled arguments), then sends its result (pickled) with the time it ran, batched
  as a real worker batches them, and reports its exit as a job does. There is no worker
  process, no interpreter and no work; the stand-ins' CPU is measured apart (their CPU
  and how late their timers fired), and it shares this machine's 2 CPUs with the master,
  as do both ends of every connection's kernel work.

Measured for each size, each in a fresh master process:

- **registration**: from ``Pool(n)`` until the master counts all ``n`` workers connected
  (handshake, payload, hello), the master process's CPU for it (all its threads), the
  listen queue's overflows and SYN retransmissions meanwhile;
- **memory and descriptors** per worker: the master's resident memory and open
  descriptors after registration (and memory after the rounds), less before, over ``n``;
- **rounds** of one task per worker (``pool.map(sleep_for, [T] * n, chunksize=1)``) for
  T = 1 s and 0.1 s: efficiency = T / the round's wall time, the master's CPU per round
  (the process's, and its hub thread's), the stand-ins' CPU per round and their timers'
  mean and largest delay, the master's time in the garbage collector (young and full
  collections: a round's mean, as a full one comes every few rounds), and the machine's
  busy CPU over the round (of 2 CPUs).

A last table draws straight lines through the sizes measured and reads them off at
10,000, 20,000 and 50,000 workers: an EXTRAPOLATION, printed as one, for sizes whose
master this machine cannot hold (see descriptors below).

``--calibrate N`` first runs rounds of the same tasks on ``N`` real local workers (forked
processes) and on ``N`` stand-ins, so that the master's CPU per task with stand-ins can be
compared with real workers'.

Descriptors: the master holds 3 a stand-in worker (its connection, its sentinel pipe's two
ends). The benchmark raises the open-file limit to ``fs.nr_open`` where it may (root with
``CAP_SYS_RESOURCE``), else to the hard limit. fiber's own check before a pool starts
counts what its backend's job costs (``Backend.files_per_job``: 3 for the stand-ins and
the cluster backends, 9 for a local job, with its pidfd and output pipes). On
this project's VM the hard limit is 20,000 and cannot be raised (no ``CAP_SYS_RESOURCE``):
a master of about 6,600 workers at most, whatever simulates them.

Usage::

    python benchmarks/master_scale.py [--sizes 1000,10000,20000,50000] [--rounds 3]
                                      [--processes 4] [--calibrate 256]
                                      [--per-job 1,64] [--gc-freeze] [--json out.json]

``--per-job 1,64`` measures each size as a job a worker and as jobs of 64 workers relayed
on a connection a job (``Pool(workers_per_job=64)``; the stand-ins relay them as
``fiber.pool._group`` does): the master then holds 3 descriptors a job, not a worker,
so that 50,000 workers fit the open-file limit.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

sys.path.insert(0, os.path.dirname(__file__))
# the checkout's tests/: fiber_ci, whose standins backend simulates the workers
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from _common import table  # noqa: E402

HERE = os.path.abspath(__file__)
TICK = os.sysconf("SC_CLK_TCK")


# -- what the master process costs ------------------------------------------------------------

def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def threads_cpu_s() -> Dict[int, Tuple[str, float]]:
    """CPU time of each thread of this process alive now: ident -> (name, seconds)."""
    out = {}
    for t in threading.enumerate():
        if t.ident is not None:
            try:
                out[t.ident] = (t.name, time.clock_gettime(time.pthread_getcpuclockid(t.ident)))
            except OSError:
                pass
    return out


def threads_delta(before: Dict[int, Tuple[str, float]]) -> Dict[str, float]:
    """CPU seconds each thread spent since ``before`` (by name, summed; a thread that
    ended meanwhile is not counted), the largest first."""
    out: Dict[str, float] = {}
    for ident, (name, seconds) in threads_cpu_s().items():
        head, _, tail = name.rpartition("-")
        if head and all(c in "0123456789abcdef" for c in tail):
            name = head  # fiber-pool-<id>, fiber-forkserver-<pid>: one name for all
        out[name] = out.get(name, 0.0) + seconds - before.get(ident, ("", 0.0))[1]
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def rss_kb() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent busy (all CPUs, /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


class GcClock:
    """The master's time in the collector (all its threads), by generation: a round's
    full collections (generation 2) are what set its worst rounds apart at 10,000
    workers (each walks the whole heap)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.counts = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._tick)

    def _tick(self, phase: str, info: Dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self._started
            self.counts[info["generation"]] += 1

    def read(self) -> Tuple[float, float, int]:
        """Seconds in young collections (generations 0 and 1), in full ones, and how many
        full ones, so far."""
        return self.seconds[0] + self.seconds[1], self.seconds[2], self.counts[2]


def tcp_ext(*names: str) -> List[int]:
    """Counters of /proc/net/netstat's TcpExt lines (listen queue overflows, SYN
    retransmissions)."""
    with open("/proc/net/netstat") as f:
        rows = [line.split() for line in f if line.startswith("TcpExt:")]
    values = dict(zip(rows[0][1:], rows[1][1:]))
    return [int(values.get(name, 0)) for name in names]


def established(port: int) -> int:
    """TCP connections established to ``port`` on this machine (the master's end)."""
    out = subprocess.run(["ss", "-tnH", "state", "established", f"sport = :{port}"],
                         capture_output=True, text=True, check=True).stdout
    return len(out.splitlines())


def raise_files() -> int:
    """Raise the open-file limit, soft and hard, to the kernel's ceiling (root)."""
    with open("/proc/sys/fs/nr_open") as f:
        ceiling = int(f.read())
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, ceiling))
    except (OSError, ValueError):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- one master (a child process) ----------------------------------------------------------

def connected(pool: Any) -> int:
    core = pool._core
    with core.hub.lock:
        return sum(1 for ws in core.service.workers.values() if ws.connected and not ws.lost)


def wait_registered(pool: Any, n: int, backend: Any, timeout: float) -> None:
    """Until the master counts ``n`` workers connected: the stand-ins' own count of
    hellos first (it costs the master nothing), then the master's."""
    deadline = time.monotonic() + timeout
    while backend is not None and sum(s["hellos"] for s in backend.stats()) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"registration: {connected(pool)} of {n} workers after "
                               f"{timeout} s")
        time.sleep(0.1)
    while connected(pool) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"registration: {connected(pool)} of {n} workers after "
                               f"{timeout} s")
        time.sleep(0.02)


def standin_totals(backend: Any) -> Dict[str, float]:
    """The stand-ins' statistics (`StandInBackend.stats`), over all of them; zeros
    without stand-ins."""
    if backend is None:
        return {"cpu_s": 0.0, "late_sum_s": 0.0, "late_max_s": 0.0, "tasks": 0,
                "last_start": 0.0, "last_end": 0.0}
    stats = backend.stats()
    return {"cpu_s": sum(s["cpu_s"] for s in stats),
            "late_sum_s": sum(s["late_sum_s"] for s in stats),
            "late_max_s": max(s["late_max_s"] for s in stats),
            "tasks": sum(s["tasks"] for s in stats),
            "last_start": max(s["last_start"] for s in stats),
            "last_end": max(s["last_end"] for s in stats)}


def one_round(pool: Any, fn: Any, n: int, seconds: float, backend: Any,
              clock: GcClock) -> Dict[str, Any]:
    """One round of ``n`` tasks of ``seconds``, one a worker; what it cost whom, and
    where its time went: from the map's call until the last task started (the master
    hands ``n`` tasks out), and from the end of the last task until the map returned
    (its result's way back; stand-ins only: they say when their tasks ran)."""
    s0 = standin_totals(backend)["cpu_s"]  # (also resets the stand-ins' round counts)
    m0, th0, b0, g0 = cpu_s(), threads_cpu_s(), machine_busy_s(), clock.read()
    t0 = time.monotonic()
    out = pool.map(fn, [seconds] * n, chunksize=1)
    t1 = time.monotonic()
    m1, threads, b1, g1 = cpu_s(), threads_delta(th0), machine_busy_s(), clock.read()
    if out != [seconds] * n:
        raise AssertionError("a round's results are wrong")
    s1 = standin_totals(backend)
    return {"wall_s": t1 - t0, "efficiency": seconds / (t1 - t0), "master_cpu_s": m1 - m0,
            "hub_cpu_s": threads.get("fiber-hub", 0.0),
            "main_cpu_s": threads.get("MainThread", 0.0), "machine_busy_s": b1 - b0,
            "standins_cpu_s": s1["cpu_s"] - s0,
            "last_start_s": s1["last_start"] - t0 if s1["last_start"] else 0.0,
            "tail_s": t1 - s1["last_end"] if s1["last_end"] else 0.0,
            "late_mean_ms": 1000 * s1["late_sum_s"] / max(1, s1["tasks"]),
            "late_max_ms": 1000 * s1["late_max_s"],
            "gc_young_ms": 1000 * (g1[0] - g0[0]), "gc_full_ms": 1000 * (g1[1] - g0[1]),
            "gc_full": g1[2] - g0[2]}


def rounds(pool: Any, fn: Any, n: int, seconds: float, count: int,
           backend: Any, clock: GcClock) -> Dict[str, Any]:
    runs = [one_round(pool, fn, n, seconds, backend, clock) for _ in range(count)]
    out: Dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    # the collector's cost is lumpy (a full collection every few rounds): its mean
    for k in ("gc_young_ms", "gc_full_ms", "gc_full"):
        out[k] = statistics.mean(r[k] for r in runs)
    out["runs"] = runs
    out["efficiency_range"] = [min(r["efficiency"] for r in runs),
                               max(r["efficiency"] for r in runs)]
    return out


def child(kind: str, n: int, count: int, processes: int, connecting: int,
          per_job: int = 1, freeze: bool = False) -> Dict[str, Any]:
    """One master: ``n`` workers of ``kind`` (``standins`` or ``local``), in jobs of
    ``per_job`` (relayed on a connection a job), measured."""
    limit = raise_files()
    import fiber
    from fiber.backends import get_backend

    from fiber_ci import standins

    standins.configure(processes=processes, connecting=connecting)
    ctx = fiber.get_context(kind)
    backend = get_backend("standins") if kind == "standins" else None
    with ctx.Pool(min(n, 8)) as warm:  # the hub, the stand-ins, the imports: not measured
        warm.map(standins.sleep_for, [0.0] * 16)
    time.sleep(1)
    gc.collect()
    out: Dict[str, Any] = {"kind": kind, "workers": n, "per_job": per_job,
                           "open_file_limit": limit,
                           "files_per_job_checked": get_backend(kind).files_per_job}
    rss0, fds0, cpu0, th0 = rss_kb(), open_fds(), cpu_s(), threads_cpu_s()
    s0 = standin_totals(backend)["cpu_s"] if backend is not None else 0.0
    net0 = tcp_ext("ListenOverflows", "ListenDrops", "TCPSynRetrans")
    t0 = time.monotonic()
    pool = None
    try:
        pool = ctx.Pool(n, workers_per_job=per_job)
        wait_registered(pool, n, backend, timeout=max(300.0, n / 20))
        out["registration_s"] = time.monotonic() - t0
        out["registration_cpu_s"] = cpu_s() - cpu0
        out["registration_threads_cpu_s"] = threads_delta(th0)
        s1 = standin_totals(backend)["cpu_s"] if backend is not None else 0.0
        out["registration_standins_cpu_s"] = s1 - s0
        net1 = tcp_ext("ListenOverflows", "ListenDrops", "TCPSynRetrans")
        out["listen_overflows"], out["listen_drops"], out["syn_retrans"] = (
            b - a for a, b in zip(net0, net1))
        time.sleep(3)  # the handshakes' timers, the watcher's polls settle
        gc.collect()
        if freeze:  # the program's choice (--gc-freeze): its heap so far out of collections
            gc.freeze()
        out["rss_kb_per_worker"] = (rss_kb() - rss0) / n
        out["fds_per_worker"] = (open_fds() - fds0) / n
        out["tcp_connections"] = established(int(pool._core.hub.address.split(
            "/unix=")[0].rsplit(":", 1)[1])) if kind == "standins" else 0
        c0, i0 = cpu_s(), time.monotonic()
        time.sleep(3)
        out["idle_cpu_per_s"] = (cpu_s() - c0) / (time.monotonic() - i0)
        clock = GcClock()
        for seconds in (1.0, 0.1):
            out[f"rounds_{seconds:g}s"] = rounds(pool, standins.sleep_for, n, seconds,
                                                 count, backend, clock)
        gc.collect()
        out["rss_kb_per_worker_after_rounds"] = (rss_kb() - rss0) / n
    except Exception as e:  # the limit reached: say which and where
        out["failed"] = f"{type(e).__name__}: {e}"
    finally:
        if pool is not None:
            pool.terminate()
    return out


# -- the parent: a master per size, the table -----------------------------------------------

def run_child(kind: str, n: int, args: argparse.Namespace,
              per_job: int = 1) -> Dict[str, Any]:
    argv = [sys.executable, HERE, "--child", kind, str(n), "--rounds", str(args.rounds),
            "--processes", str(args.processes), "--connecting", str(args.connecting),
            "--per-job", str(per_job)] + (["--gc-freeze"] if args.gc_freeze else [])
    print(f"... {kind} master with {n} workers in jobs of {per_job}", file=sys.stderr,
          flush=True)
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"kind": kind, "workers": n, "per_job": per_job,
                "failed": f"no result within {args.timeout} s"}
    lines = [line for line in cp.stdout.splitlines() if line.startswith("{")]
    if cp.returncode != 0 or not lines:
        return {"kind": kind, "workers": n, "per_job": per_job,
                "failed": f"exit {cp.returncode}: {cp.stderr.strip()[-2000:]}"}
    if cp.stderr.strip():
        print(cp.stderr.strip()[-2000:], file=sys.stderr)
    return dict(json.loads(lines[-1]))


def _label(r: Dict[str, Any]) -> str:
    jobs = f" /{r['per_job']}" if r.get("per_job", 1) > 1 else ""
    return f"{'real local' if r['kind'] == 'local' else 'stand-ins'} {r['workers']}{jobs}"


def _start_row(r: Dict[str, Any], base: Optional[Dict[str, Any]]) -> List[Any]:
    n = r["workers"]
    ratio = "" if r.get("calibration") or base is None else (
        f" ({r['registration_cpu_s'] / base['registration_cpu_s']:.1f}x)")
    threads = r["registration_threads_cpu_s"]
    top = ", ".join(f"{k} {v:.1f}" for k, v in list(threads.items())[:3])
    return [_label(r), f"{r['registration_s']:.1f}",
            f"{r['registration_cpu_s']:.1f}{ratio}", f"{1000 * r['registration_cpu_s'] / n:.2f}",
            top, f"{r['registration_standins_cpu_s']:.1f}",
            f"{r['listen_overflows']} / {r['syn_retrans']}",
            f"{r['rss_kb_per_worker']:.1f} / {r['rss_kb_per_worker_after_rounds']:.1f}",
            f"{r['fds_per_worker']:.2f}", r["tcp_connections"],
            f"{1000 * r['idle_cpu_per_s']:.0f}"]


def _round_row(r: Dict[str, Any], key: str, base: Optional[Dict[str, Any]]) -> List[Any]:
    n, x = r["workers"], r[key]
    lo, hi = x["efficiency_range"]
    ratio = "" if r.get("calibration") or base is None else (
        f" ({x['master_cpu_s'] / base[key]['master_cpu_s']:.1f}x)")
    return [_label(r), f"{x['efficiency']:.3f} ({lo:.3f}-{hi:.3f})", f"{x['wall_s']:.2f}",
            f"{1000 * x['last_start_s']:.0f} / {1000 * x['tail_s']:.0f}",
            f"{x['master_cpu_s']:.2f}{ratio}", f"{1e6 * x['master_cpu_s'] / n:.0f}",
            f"{x['hub_cpu_s']:.2f} / {x['main_cpu_s']:.2f}", f"{x['standins_cpu_s']:.2f}",
            f"{x['late_mean_ms']:.1f} / {x['late_max_ms']:.0f}",
            f"{x.get('gc_young_ms', 0):.0f} / {x.get('gc_full_ms', 0):.0f} "
            f"({x.get('gc_full', 0):.2f})",
            f"{x['machine_busy_s'] / x['wall_s']:.2f}"]


def report(results: List[Dict[str, Any]]) -> None:
    """The tables: start-up, then rounds of 1 s and 0.1 s tasks; ratios (Nx) are against
    the first size measured (the calibration rows aside)."""
    ok = [r for r in results if "failed" not in r]
    sized = [r for r in ok if not r.get("calibration")]
    base = sized[0] if sized else None
    table("SIMULATION (real master, stand-in workers): registration, memory, descriptors",
          ["workers", "registration s", "master CPU s (x first)", "ms/worker",
           "busiest threads' CPU s", "stand-ins CPU s", "listen overflows / SYN retrans",
           "master KB/worker (after rounds)", "fds/worker", "TCP conns", "idle CPU ms/s"],
          [_start_row(r, base) for r in ok])
    for seconds in ("1", "0.1"):
        key = f"rounds_{seconds}s"
        table(f"SIMULATION (real master, stand-in workers): rounds of one {seconds} s task "
              "a worker, medians",
              ["workers", "efficiency (range)", "round s", "last start / tail ms",
               "master CPU s (x first)", "us/task", "hub / main thread s", "stand-ins CPU s",
               "timer delay ms mean / max", "GC ms young / full (full a round)",
               "busy CPUs (of 2)"],
              [_round_row(r, key, base) for r in ok if key in r])
    for r in results:
        if "failed" in r:
            print(f"\n{_label(r)}: FAILED: {r['failed']}")
    for per_job in sorted({r.get("per_job", 1) for r in sized}):
        layout = [r for r in sized if r.get("per_job", 1) == per_job]
        if len(layout) >= 2:
            extrapolate(layout, [10000, 20000, 50000])


def _fit(xs: List[float], ys: List[float]) -> Tuple[float, float]:
    """Least squares ``y = a + b x``: (a, b)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - b * mx, b


def extrapolate(sized: List[Dict[str, Any]], sizes: List[int]) -> None:
    """Straight lines through the measured sizes, read off at ``sizes`` that were not
    measured (a master that cannot hold them here: see the open-file limit)."""
    ns = [float(r["workers"]) for r in sized]
    lines = {"registration CPU s": [r["registration_cpu_s"] for r in sized],
             "memory MB": [r["rss_kb_per_worker_after_rounds"] * r["workers"] / 1024
                           for r in sized]}
    for seconds in ("1", "0.1"):
        key = f"rounds_{seconds}s"
        lines[f"{seconds} s round: master CPU s"] = [r[key]["master_cpu_s"] for r in sized]
        lines[f"{seconds} s round: time over the task s"] = [
            r[key]["wall_s"] - float(seconds) for r in sized]
    rows = []
    for name, ys in lines.items():
        a, b = _fit(ns, ys)
        slope = f"{1024 * b:.1f} KB" if name.startswith("memory") else f"{1e6 * b:.0f} us"
        rows.append([name, slope, *(f"{a + b * n:.2f}" for n in sizes)])
    for seconds in ("1", "0.1"):
        a, b = _fit(ns, lines[f"{seconds} s round: time over the task s"])
        rows.append([f"{seconds} s round: efficiency", "-",
                     *(f"{float(seconds) / (float(seconds) + a + b * n):.2f}" for n in sizes)])
    table(f"EXTRAPOLATED, not measured: straight lines through {len(ns)} simulated sizes "
          f"({', '.join(str(int(n)) for n in ns)}), jobs of {sized[0].get('per_job', 1)}",
          ["quantity", "a worker more", *(f"at {n}" for n in sizes)], rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,20000,50000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=4, help="stand-in processes")
    parser.add_argument("--connecting", type=int, default=128,
                        help="simulated workers a stand-in process connects at a time")
    parser.add_argument("--calibrate", type=int, default=0,
                        help="first compare N real local workers with N stand-ins")
    parser.add_argument("--timeout", type=float, default=3600.0)
    parser.add_argument("--json", default="")
    parser.add_argument("--per-job", default="1",
                        help="workers a job, relayed on its connection (fiber.pool._group); "
                             "a list (1,64) measures each layout at each size")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() in the master once its pool is up, as a program "
                             "may: the garbage collector's full passes then skip the "
                             "master's heap so far (the pool's workers' records)")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "N"))
    args = parser.parse_args()
    if args.child:
        kind, n = args.child[0], int(args.child[1])
        print(json.dumps(child(kind, n, args.rounds, args.processes, args.connecting,
                               int(args.per_job), args.gc_freeze)))
        return
    print("SIMULATION: a real fiber master (Pool, hub, TCP sockets) driven by stand-in "
          "workers that speak its protocol and run each task as a timer "
          "(fiber_ci.standins); not real worker processes."
          + (" The master calls gc.freeze() once its pool is up (--gc-freeze)."
             if args.gc_freeze else ""))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"open-file limit here: {soft} (hard {hard}); fiber's open-file check counts "
          "3 descriptors a stand-in job (Backend.files_per_job)")
    results = []
    if args.calibrate:
        for kind in ("local", "standins"):
            results.append(dict(run_child(kind, args.calibrate, args), calibration=True))
    for n in (int(s) for s in args.sizes.split(",")):
        for per_job in (int(k) for k in args.per_job.split(",")):
            results.append(run_child("standins", n, args, per_job))
    report(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
