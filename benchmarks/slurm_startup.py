"""Start-up latency of a ``fiber.Pool(64)`` on the Slurm backend.

Measured in a fresh interpreter per run (the master's first pool: its hub starts inside
the measured time), from the ``Pool(64)`` call:

- ``sbatch``: the one ``sbatch`` call that submits the 64 workers as a job array
  (its own duration, and when it returned);
- ``first result``: ``pool.apply(noop)`` returns (the first worker connected and answered);
- ``all connected``: all 64 workers have connected to the pool (polled every 5 ms);
- ``terminate``: ``pool.terminate()`` until Slurm reports every worker job ended.

The test cluster (``scripts/slurm-cluster.sh start 3``) has 3 nodes x 2 CPUs, and a worker
asks for 1 CPU, so only 6 of 64 workers could run at once. Unless ``--partition`` is given,
the benchmark therefore creates a temporary partition ``fiberbench`` over all nodes with
``OverSubscribe=FORCE:32`` (``scontrol create``; up to 32 jobs share a core), runs the pool
in it (``slurm_partition=fiberbench``) and deletes it afterwards. All "nodes" share this
machine's cores, so 64 Python interpreters starting at once is CPU-bound here.

Usage (root, cluster running)::

    scripts/slurm-cluster.sh start 3 && eval "$(scripts/slurm-cluster.sh env)"
    .venv/bin/python benchmarks/slurm_startup.py [--workers 64] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

PARTITION = "fiberbench"


def noop() -> int:
    return 0


def one_run(workers: int) -> Dict[str, float]:
    import fiber
    from fiber.backends import get_backend

    backend = get_backend("slurm")
    sbatch: Dict[str, float] = {}
    run = backend.run_command

    def timed(argv: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return run(argv, **kw)
        finally:
            if argv[0] == "sbatch":
                sbatch["took"] = time.perf_counter() - t
                sbatch["returned"] = time.perf_counter() - t0

    backend.run_command = timed  # type: ignore[method-assign]
    t0 = time.perf_counter()
    pool = fiber.Pool(workers)
    pool.apply(noop)
    first = time.perf_counter() - t0
    service = pool._core.service
    while sum(1 for w in list(service.workers.values()) if w.connected) < workers:
        if time.perf_counter() - t0 > 600:
            raise RuntimeError("workers did not all connect within 600 s")
        time.sleep(0.005)
    connected = time.perf_counter() - t0
    hosts = sorted({ws.process._job.handle.host for ws in pool._core.procs.values()})
    t1 = time.perf_counter()
    pool.terminate()
    terminated = time.perf_counter() - t1
    return {"sbatch_ms": sbatch.get("took", float("nan")) * 1000,
            "sbatch_returned_s": sbatch.get("returned", float("nan")),
            "first_result_s": first, "all_connected_s": connected,
            "terminate_s": terminated, "hosts": len(hosts)}


def _scontrol(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partition", default="",
                    help="run in this partition instead of a temporary oversubscribed one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import fiber

        fiber.init(backend="slurm", slurm_partition=args.partition,
                   listen_host=os.environ.get("FIBER_LISTEN_HOST", ""))
        print("RESULT " + json.dumps(one_run(args.workers)), flush=True)
        return
    if not os.environ.get("SLURM_CONF"):
        sys.exit('SLURM_CONF is not set: eval "$(scripts/slurm-cluster.sh env)" first')
    partition, created = args.partition, False
    if not partition:
        cp = _scontrol("create", f"PartitionName={PARTITION}", "Nodes=ALL",
                       "OverSubscribe=FORCE:32", "MaxTime=INFINITE", "State=UP")
        if cp.returncode != 0:
            sys.exit(f"cannot create partition {PARTITION}: {cp.stderr.strip()}")
        partition, created = PARTITION, True
    rows: List[Dict[str, float]] = []
    try:
        for i in range(args.runs):
            cp = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                 "--workers", str(args.workers), "--partition", partition],
                                capture_output=True, text=True, timeout=900)
            lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("RESULT ")]
            if cp.returncode != 0 or not lines:
                sys.exit(f"run {i + 1} failed (exit {cp.returncode}):\n{cp.stdout}\n{cp.stderr}")
            rows.append(json.loads(lines[-1][len("RESULT "):]))
            time.sleep(2)  # let Slurm reap the previous pool's jobs
    finally:
        if created:
            _scontrol("delete", f"PartitionName={PARTITION}")
    nodes = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %c"], capture_output=True,
                           text=True, timeout=30).stdout.split("\n")
    print(f"fiber.Pool({args.workers}) on Slurm, partition {partition!r}"
          f"{' (temporary, OverSubscribe=FORCE:32)' if created else ''}; nodes (name CPUs): "
          + ", ".join(n for n in nodes if n) + f"; this machine: {os.cpu_count()} cores")
    cols = [("sbatch_ms", "sbatch call (ms)"), ("sbatch_returned_s", "sbatch done (s)"),
            ("first_result_s", "first result (s)"),
            ("all_connected_s", f"all {args.workers} connected (s)"),
            ("terminate_s", "terminate (s)"), ("hosts", "nodes used")]
    widths = [max(len(title), 8) for _, title in cols]
    print("run   " + "  ".join(t.rjust(w) for (_, t), w in zip(cols, widths)))
    for i, row in enumerate(rows, 1):
        print(f"{i:<5} " + "  ".join(_fmt(row[k]).rjust(w) for (k, _), w in zip(cols, widths)))
    print("med   " + "  ".join(_fmt(statistics.median(r[k] for r in rows)).rjust(w)
                               for (k, _), w in zip(cols, widths)))


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 100 or float(v).is_integer() else f"{v:.2f}"


if __name__ == "__main__":
    main()
