"""A pool as one job a worker against jobs of several workers (``workers_per_job``), in
one run, on the backend the config names (``--backend``): real workers, real jobs.

For each layout, in a fresh pool:

- **start**: from ``Pool()`` until every worker has connected (``wait_until_workers_up``),
  the cluster jobs it took, and the connections the master holds for its workers (one a
  job, relayed, for jobs of several);
- **apply** in a loop: one task's round trip (through the job's relay, for jobs of
  several: a hop more);
- **rounds** of one task per worker (``map(sleep, [T] * n, chunksize=1)``): efficiency =
  T / the round's wall time;
- **replacement**: a worker SIGKILLed (by the pid its task reported: the backends whose
  hosts share this machine's pid namespace, local, netns, Slurm, Grid Engine and ssh here;
  skipped, with the next two, on the others: a pod's pid is not this machine's) until the
  pool has all its workers connected again: a new cluster job for a job of one, a fork in
  its job for a job of several;
- **a job killed**: a round's wall time when one job is SIGKILLed half-way through it
  (its workers' tasks run again elsewhere; every result arrives), and until the pool has
  all its workers again;
- **memory**: the proportional set size of the workers (``/proc/PID/smaps_rollup``; its
  job's first process, where it is not a worker, not counted), a worker's mean.

Ratios are layout K against layout 1. Example::

    python benchmarks/pool_jobs.py --workers 64 --per-job 32 --backend local
    python benchmarks/pool_jobs.py --workers 1024 --per-job 64 --backend netns --hosts 16
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from typing import Dict, List, Optional, Tuple

from _common import rollup_mb, table  # type: ignore[import-not-found]

import fiber


def sleep_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def sleep_ids(seconds: float) -> Tuple[int, int]:
    time.sleep(seconds)
    return os.getpid(), os.getppid()


#: the backends whose workers' pids are this machine's (their hosts share its pid namespace)
PIDS_HERE = ("local", "netns", "slurm", "sge", "ssh")


def measure(n: int, per_job: int, rounds: int, task_s: float,
            cpu: Optional[float], pids_here: bool = True) -> Dict[str, float]:
    out: Dict[str, float] = dict.fromkeys(
        ("pss_mb", "replace_s", "job_kill_round_s", "job_back_s"), float("nan"))
    started = time.monotonic()
    pool = fiber.Pool(n, workers_per_job=per_job, cpu=cpu)
    try:
        pool.wait_until_workers_up(timeout=900)
        out["start_s"] = time.monotonic() - started
        out["jobs"] = len({w.job_id for w in pool.status().workers})
        service = pool._core.service  # what the master holds (not public: a benchmark)
        out["links"] = len(service.by_peer) + len(service.relays)
        t = time.monotonic()
        for _ in range(200):
            pool.apply(sleep_pid, (0.0,))
        out["apply_us"] = (time.monotonic() - t) / 200 * 1e6
        pool.map(sleep_pid, [0.0] * n, 1)  # every worker has its function
        efficiency: List[float] = []
        pids: List[int] = []
        for _ in range(rounds):
            t = time.monotonic()
            pids = pool.map(sleep_pid, [task_s] * n, 1)
            efficiency.append(task_s / (time.monotonic() - t))
        out["efficiency"] = statistics.mean(efficiency)
        if not pids_here:
            return out  # a pid the tasks report is not this machine's: nothing to kill
        known = []
        for pid in set(pids):
            try:
                known.append(rollup_mb(pid)["Pss"])
            except OSError:
                pass  # ended meanwhile
        out["pss_mb"] = statistics.mean(known) if known else float("nan")
        restarts = sum(w.restarts for w in pool.status().workers)
        t = time.monotonic()
        os.kill(pids[0], signal.SIGKILL)
        while sum(w.restarts for w in pool.status().workers) == restarts:
            time.sleep(0.001)  # until its replacement is on its way
        pool.wait_until_workers_up(timeout=900)
        out["replace_s"] = time.monotonic() - t
        # a whole job SIGKILLed mid-round: its worker, or its group and so its workers
        ids = pool.map(sleep_ids, [0.0] * n, 1)
        victim = ids[0][1] if per_job > 1 else ids[0][0]
        restarts = sum(w.restarts for w in pool.status().workers)
        t = time.monotonic()
        result = pool.map_async(sleep_ids, [task_s] * n, 1)
        time.sleep(task_s / 2)
        os.kill(victim, signal.SIGKILL)
        done = result.get(timeout=900)
        out["job_kill_round_s"] = time.monotonic() - t
        if len(done) != n:
            raise AssertionError("a round with a job killed lost results")
        while sum(w.restarts for w in pool.status().workers) == restarts:
            time.sleep(0.001)
        pool.wait_until_workers_up(timeout=900)
        out["job_back_s"] = time.monotonic() - t
    finally:
        pool.terminate()
    return out


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--per-job", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--task-ms", type=float, default=200.0)
    ap.add_argument("--cpu", type=float, default=None,
                    help="CPUs a worker asks for (a job of K asks K times it)")
    ap.add_argument("--backend", default="local",
                    help="local, slurm, sge, ssh, kubernetes, ... or netns (with --hosts "
                    "network-namespace hosts); the kills and memory only where workers' pids "
                    "are this machine's: " + ", ".join(PIDS_HERE))
    ap.add_argument("--hosts", type=int, default=4, help="netns hosts (root)")
    ap.add_argument("--only-jobs", action="store_true",
                    help="measure jobs of --per-job alone (a job a worker does not fit)")
    args = ap.parse_args()
    hosts = None
    if args.backend == "netns":
        # the checkout's tests/: fiber_ci, the netns test hosts (not in the package)
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                        "tests"))
        from fiber_ci import netns
        hosts = netns.Hosts(args.hosts).start()
        os.environ[netns.HOSTS_ENV] = hosts.to_env()
    try:
        fiber.init(backend=args.backend)
        run(args)
    finally:
        if hosts is not None:
            hosts.stop()


def run(args: argparse.Namespace) -> None:
    layouts = [args.per_job] if args.only_jobs else [1, args.per_job]
    pids_here = args.backend in PIDS_HERE
    results = {k: measure(args.workers, k, args.rounds, args.task_ms / 1000, args.cpu,
                          pids_here) for k in layouts}
    many = results[args.per_job]
    one = results.get(1, {key: float("nan") for key in many})
    rows = []
    for key, label in (("start_s", "start, every worker connected (s)"),
                       ("jobs", "cluster jobs"),
                       ("links", "the master's connections to workers"),
                       ("apply_us", "apply() in a loop: a round trip (us)"),
                       ("efficiency", f"rounds of {args.task_ms:g} ms tasks: efficiency"),
                       ("replace_s", "a worker killed: back to full (s)"),
                       ("job_kill_round_s", "a round with a job killed mid-way (s)"),
                       ("job_back_s", "... from its start until back to full (s)"),
                       ("pss_mb", "a worker's proportional set size (MB)")):
        ratio = many[key] / one[key] if one[key] == one[key] and one[key] else float("nan")
        rows.append([label, _fmt(one[key]), _fmt(many[key]), f"{ratio:.3g}x"])
    where = f"{args.hosts} netns hosts" if args.backend == "netns" else args.backend
    table(f"Pool({args.workers}) on {where}: a job a worker vs jobs of "
          f"{args.per_job}", ["", "jobs of 1", f"jobs of {args.per_job}", "ratio"], rows)


if __name__ == "__main__":
    main()
