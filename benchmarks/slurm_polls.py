"""What one status poll of a Slurm pool costs slurmctld, by the way it asks ``squeue``.

A pool's jobs are its job arrays and the jobs of its replacement workers (each its own
``sbatch``). Given **one** job id, squeue asks slurmctld for that job alone
(REQUEST_JOB_INFO_SINGLE); given several, for every job in the cluster, which it filters
itself (REQUEST_JOB_INFO); given one user and no id, for that user's jobs
(REQUEST_JOB_USER_INFO; squeue 22.05 takes uid 0 for "no user": for root, every job).
This script submits, on the Slurm test cluster, held jobs of another user (``nobody``:
the rest of a shared cluster's queue) and the jobs of a stand-in pool (running ``sleep``
arrays in partition ``wide``, plus single jobs as replacements), then times each way of
polling them, ``--polls`` times:

- ``all ids, one call``: ``squeue -j A,B,...`` (the backend before it asked per id);
- ``one call an id``: ``squeue -j A``, ``squeue -j B``, ... one after the other;
- ``one call an id, parallel``: the same, 8 in flight (``backends._common.PARALLEL``);
- ``the user's jobs``: ``squeue -u <uid>`` (the backend's way past ``ALONE`` ids);
- ``backend.status()``: what the slurm backend in this tree does for those jobs.

For each: slurmctld's RPCs and microseconds per poll (``sdiag``, by message type), the
poll's wall time and the CPU its ``squeue`` processes cost this host. Run as root::

    scripts/slurm-cluster.sh start 3 && eval "$(scripts/slurm-cluster.sh env)"
    python benchmarks/slurm_polls.py [--background 600] [--shapes 1x128+1,10x12+0,1x64+20]

With ``--as USER`` the pool is USER's and its polls run as USER (``runuser``, which adds
its own CPU to the host's), the queue's other jobs being root's; the backend's own poll,
which runs as this process, is then left out::

    python benchmarks/slurm_polls.py --as nobody --background-user root

A shape ``KxT+J`` is K arrays of T tasks and J single jobs. Everything submitted is
cancelled at the end.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from typing import Callable, Dict, List, Sequence, Tuple

from fiber.backends import JobHandle
from fiber.backends._common import parallel
from fiber.backends.slurm import SlurmBackend
from fiber.backends.slurm._status import SQUEUE_FORMAT

JOB_INFO = ("REQUEST_JOB_INFO", "REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_USER_INFO")
SQUEUE = ["squeue", "--noheader", "--array", "--states=all", f"--Format={SQUEUE_FORMAT}"]


#: ``runuser -u USER --`` with ``--as``: how the pool's commands are run.
AS: List[str] = []


def run(argv: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run_as(argv: Sequence[str]) -> subprocess.CompletedProcess:
    return run([*AS, *argv])


def sdiag() -> Dict[str, Tuple[int, int]]:
    """slurmctld's (count, total microseconds) per RPC type so far."""
    out = run(["sdiag"]).stdout
    return {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(
        r"^\s*(REQUEST_\w+)\s*\(\s*\d+\)\s*count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)",
        out, re.MULTILINE)}


def sbatch(*args: str, user: str = "") -> str:
    argv = ["sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *args]
    argv = ["runuser", "-u", user, "--", *argv] if user and user != "root" else [*AS, *argv]
    cp = run(argv)
    if cp.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed: {cp.stderr.strip()}")
    return cp.stdout.strip().split(";")[0]


def wait_running(ids: List[str], tasks: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        out = run(["squeue", "-h", "-r", "-t", "running", "-j", ",".join(ids), "-o", "%i"])
        if len(out.stdout.split()) >= tasks:
            return
        if time.monotonic() > deadline:
            sys.exit(f"only {len(out.stdout.split())} of {tasks} tasks running")
        time.sleep(1)


def measure(poll: Callable[[], None], polls: int) -> Dict[str, float]:
    """Per poll: slurmctld's job-info RPCs and µs, its other RPCs, wall ms, CPU ms."""
    before, t0 = sdiag(), time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(polls):
        poll()
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s1 = resource.getrusage(resource.RUSAGE_SELF)
    after = sdiag()
    grew = {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
            for k in after if k != "REQUEST_STATS_INFO"}
    out = {f"{k} /poll": round(grew.get(k, (0, 0))[0] / polls, 2) for k in JOB_INFO}
    out["slurmctld µs /poll"] = round(sum(grew.get(k, (0, 0))[1] for k in JOB_INFO) / polls)
    out["other RPCs /poll"] = round(sum(c for k, (c, _) in grew.items()
                                        if k not in JOB_INFO) / polls, 2)
    out["wall ms /poll"] = round(1000 * wall / polls, 1)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
           + s1.ru_utime + s1.ru_stime - s0.ru_utime - s0.ru_stime)
    out["CPU ms /poll (squeue + this)"] = round(1000 * cpu / polls, 1)
    return out


def ways(ids: List[str], handles: List[JobHandle]) -> Dict[str, Callable[[], None]]:
    """The ways of polling the jobs ``ids`` (their tasks: ``handles``), by name."""
    backend = SlurmBackend()
    each = [[*SQUEUE, f"--jobs={i}"] for i in ids]
    uid = int(run_as(["id", "-u"]).stdout)

    def all_ids() -> None:
        run_as([*SQUEUE, f"--jobs={','.join(ids)}"])

    def one_by_one() -> None:
        for argv in each:
            run_as(argv)

    def in_parallel() -> None:
        parallel(run_as, each)

    def users_jobs() -> None:
        run_as([*SQUEUE, f"--user={uid}"])

    def backend_status() -> None:
        backend.status(handles)

    found = {"all ids, one call": all_ids, "one call an id": one_by_one,
             "one call an id, parallel": in_parallel, "the user's jobs": users_jobs}
    if not AS:
        found["backend.status()"] = backend_status
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--background", type=int, default=600,
                    help="held jobs of another user: the rest of the cluster's queue")
    ap.add_argument("--background-user", default="nobody",
                    help="who submits them (run as root; default nobody)")
    ap.add_argument("--shapes", default="1x128+1,10x12+0,1x64+20",
                    help="pools to poll, each K arrays of T tasks + J single jobs")
    ap.add_argument("--polls", type=int, default=20)
    ap.add_argument("--as", dest="as_user", default="", help="the pool's user (see above)")
    args = ap.parse_args()
    if args.as_user:
        AS[:] = ["runuser", "-u", args.as_user, "--"]
    if not os.environ.get("SLURM_CONF"):
        sys.exit('SLURM_CONF is not set: eval "$(scripts/slurm-cluster.sh env)" first')
    mine: List[str] = []
    try:
        for _ in range(args.background):
            mine.append(sbatch("--hold", "--partition=debug", "--wrap=true",
                               user=args.background_user))
        print(f"{args.polls} polls each way; load {os.getloadavg()[0]:.1f}")
        for shape in args.shapes.split(","):
            m = re.fullmatch(r"(\d+)x(\d+)\+(\d+)", shape.strip())
            if not m:
                sys.exit(f"--shapes: {shape!r} is not KxT+J")
            k, t, j = (int(g) for g in m.groups())
            arrays = [sbatch("--partition=wide", f"--array=0-{t - 1}", "--wrap=sleep 900")
                      for _ in range(k)]
            singles = [sbatch("--partition=wide", "--wrap=sleep 900") for _ in range(j)]
            ids = arrays + singles
            mine += ids
            wait_running(ids, k * t + j)
            handles = [JobHandle(f"{a}_{i}", "slurm") for a in arrays for i in range(t)]
            handles += [JobHandle(s, "slurm") for s in singles]
            records = len(run(["squeue", "-h", "-r", "-t", "all", "-o", "%i"]).stdout.split())
            print(f"\npool of {k} array(s) of {t} + {j} single job(s): {len(ids)} job ids, "
                  f"{len(handles)} tasks; slurmctld holds {records} job records")
            for name, poll in ways(ids, handles).items():
                print(f"  {name:26} {measure(poll, args.polls)}")
            run(["scancel", *ids])
            time.sleep(2)  # their ends are RPCs too: not in the next pool's polls
    finally:
        for n in range(0, len(mine), 200):
            run(["scancel", *mine[n:n + 200]])


if __name__ == "__main__":
    main()
