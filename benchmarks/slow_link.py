"""A pool whose workers are a slow link away: tasks a second of an ordered ``imap``,
against what its workers could do (``workers / task time``), for one or more versions of
fiber in the same run, alternating (as ``compare.py``, whose version specs it takes).

Two netns hosts (root), each link delayed by ``--delay-ms`` each way by the project's
shaper (``Hosts.shape``): a round trip of twice that. Each run is a fresh master (the
version's ``src`` on ``PYTHONPATH``, its jobs inheriting it) with ``Pool(--workers)``,
all workers connected and the function run once on each, then ``imap`` of ``--tasks``
tasks of ``--task-ms`` (a sleep), chunksize 1.

    sudo .venv/bin/python benchmarks/slow_link.py --baseline HEAD~1 [--candidate DIR]
        [--delay-ms 50] [--task-ms 20] [--tasks 400] [--workers 4] [--runs 3]

``--delay-ms 0 --task-ms 200 --tasks 16`` checks the other side: long tasks on a fast
link keep their balance (no worker holds a task that another could run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from compare import Version, resolve  # noqa: E402


def work(x: int, seconds: float) -> int:
    time.sleep(seconds)
    return x * x


def child(args: argparse.Namespace) -> None:
    import fiber

    import fiber_ci.netns  # noqa: F401 - registers the netns backend

    fiber.init(backend="netns")
    seconds = args.task_ms / 1000
    task = _Task(seconds)
    with fiber.Pool(args.workers) as pool:
        pool.map(task, range(args.workers), 1)  # every worker connected, the task measured
        t0 = time.monotonic()
        got = list(pool.imap(task, range(args.tasks), 1))
        wall = time.monotonic() - t0
    assert got == [x * x for x in range(args.tasks)], "results differ"
    print(json.dumps({"rate": args.tasks / wall, "wall": wall, "fiber": fiber.__file__}))


class _Task:
    """``work(x, seconds)`` as a function of ``x``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, x: int) -> int:
        return work(x, self.seconds)


def run(version: Version, args: argparse.Namespace, hosts_env: str, cwd: str) -> Dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if version.pythonpath is not None:
        env["PYTHONPATH"] = version.pythonpath + os.pathsep + HERE
    else:
        env["PYTHONPATH"] = HERE
    from fiber_ci import netns

    env[netns.HOSTS_ENV] = hosts_env
    cmd = [version.python, os.path.abspath(__file__), "--child", "--workers",
           str(args.workers), "--tasks", str(args.tasks), "--task-ms", str(args.task_ms)]
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"{version.label} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", action="append", default=[])
    p.add_argument("--candidate", default=os.path.dirname(HERE))
    p.add_argument("--delay-ms", type=float, default=50.0, help="added each way (ms)")
    p.add_argument("--task-ms", type=float, default=20.0)
    p.add_argument("--tasks", type=int, default=400)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    from fiber_ci import netns

    ideal = args.workers / (args.task_ms / 1000)
    with tempfile.TemporaryDirectory(prefix="fiber-slow-link-") as scratch:
        versions = [resolve(s, scratch) for s in [*args.baseline, args.candidate]]
        hosts = netns.Hosts(2).start()
        try:
            if args.delay_ms > 0:
                for i in (1, 2):
                    hosts.shape(i, delay_ms=args.delay_ms, towards="both")
            rates: Dict[str, List[float]] = {v.label: [] for v in versions}
            for r in range(args.runs):
                for v in versions[r % len(versions):] + versions[:r % len(versions)]:
                    rates[v.label].append(run(v, args, hosts.to_env(), scratch)["rate"])
        finally:
            hosts.stop()
    print(f"slow_link: Pool({args.workers}) over 2 netns hosts, {2 * args.delay_ms:g} ms "
          f"round trip, imap of {args.tasks} tasks of {args.task_ms:g} ms; ideal "
          f"{ideal:.0f} tasks/s; {args.runs} runs a version, alternating")
    first = statistics.median(rates[versions[0].label])
    for v in versions:
        med = statistics.median(rates[v.label])
        print(f"  {v.label:>24}  {med:7.1f} tasks/s  ({min(rates[v.label]):.1f}-"
              f"{max(rates[v.label]):.1f})  {med / ideal:.2f} of ideal  "
              f"{med / first:.2f}x {versions[0].label}   [{v.describe}]")


if __name__ == "__main__":
    main()
