"""What the dashboard costs a running pool: rounds of 1 ms tasks with the dashboard off,
on and idle, and on with a browser's polling (a snapshot and /metrics every second),
in one run, alternating, each in a fresh process.

    .venv/bin/python benchmarks/dashboard_cost.py [--workers N] [--rounds R] [--runs K]

A round is one 1 ms task per worker, then a wait for all of them (the RL/ES step
pattern); rounds are timed once every worker has connected. The browser is a process of
its own, as a browser is. Printed: the median round time of each mode and its ratio to
"off"; and the CPU the rounds took, of the master alone and of the whole machine (from
/proc/stat: every job, the browser, and whatever else runs, so run it on a quiet
machine), per round: on two CPUs a round's time moves by a few percent from one run to
the next for no reason of its own, its CPU much less.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
from typing import Dict, List

from _common import table

import fiber

MODES = ("off", "on, idle", "on, polled")


def task(_: int) -> None:
    time.sleep(0.001)


def _machine_cpu() -> float:
    """CPU seconds all this machine's CPUs have spent busy since it started."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _poll(address: str, token: str) -> None:
    """The browser: another process (a thread of the program would take the GIL its hub
    needs, which a browser does not), asking for what the page asks every second."""
    url = urllib.parse.urlsplit(address)
    while True:
        time.sleep(1.0)
        for path in ("/api/snapshot?workers=0:100", "/metrics"):  # the page's first page
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            conn.getresponse().read()
            conn.close()


def _all_up(pool: fiber.Pool, timeout: float = 300.0) -> None:
    """Wait until every worker has connected: a Pool(1024) on 2 CPUs takes ~10 s, and
    rounds timed while workers still start measure the start, not the dashboard."""
    deadline = time.monotonic() + timeout
    size = pool.status().size
    while True:
        workers = pool.status().workers  # those the pool has started so far
        if len(workers) == size and all(w.state != "starting" for w in workers):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers still starting after {timeout:g} s")
        pool.map(task, range(size), 1)
    pool.map(task, range(size * 4), 1)  # warm


def child(mode: str, workers: int, rounds: int) -> None:
    if mode != "off":
        fiber.init(dashboard="127.0.0.1:0")
    browser = None
    with fiber.Pool(workers) as pool:
        _all_up(pool)
        if mode == "on, polled":
            from fiber.dashboard import serve_program

            board = serve_program("127.0.0.1:0")
            browser = subprocess.Popen([sys.executable, __file__, "--poll", board.address,
                                        board.token])
        times = []
        cpu, machine = time.process_time(), _machine_cpu()
        for _ in range(rounds):
            t = time.perf_counter()
            pool.map(task, range(workers), 1)
            times.append(time.perf_counter() - t)
        cpu, machine = time.process_time() - cpu, _machine_cpu() - machine
        if browser is not None:
            browser.kill()
            browser.wait()
    print(json.dumps([statistics.median(times), cpu / rounds, machine / rounds]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", choices=MODES)
    parser.add_argument("--poll", nargs=2, metavar=("ADDRESS", "TOKEN"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.poll:
        _poll(*args.poll)
        return
    if args.child:
        child(args.child, args.workers, args.rounds)
        return
    medians: Dict[str, List[float]] = {m: [] for m in MODES}
    master: Dict[str, List[float]] = {m: [] for m in MODES}  # CPU s per round
    machine: Dict[str, List[float]] = {m: [] for m in MODES}
    env = {k: v for k, v in os.environ.items() if k != "FIBER_DASHBOARD"}
    for run in range(args.runs):
        # the order rotates from one run to the next, as in compare.py: the load a mode's
        # 1,024 ending jobs leave is not always met by the same next mode
        for mode in MODES[run % len(MODES):] + MODES[:run % len(MODES)]:
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--workers",
                                  str(args.workers), "--rounds", str(args.rounds)],
                                 env=env, capture_output=True, text=True, check=True)
            median, cpu, busy = json.loads(out.stdout.strip().splitlines()[-1])
            medians[mode].append(median)
            master[mode].append(cpu)
            machine[mode].append(busy)

    def ratio(values: Dict[str, List[float]], mode: str) -> str:
        # each run's ratio to the "off" of the same run (the VM's drift over minutes
        # cancels), the median of them
        return f"{statistics.median(v / off for v, off in zip(values[mode], values['off'])):.3f}x"

    table(f"Pool({args.workers}), rounds of 1 ms tasks, {args.runs} runs of {args.rounds}",
          ["dashboard", "median round", "runs' range", "vs off", "master CPU/round", "vs off",
           "machine CPU/round", "vs off"],
          [[m, f"{statistics.median(v) * 1e3:.2f} ms",
            f"{min(v) * 1e3:.0f}-{max(v) * 1e3:.0f} ms", ratio(medians, m),
            f"{statistics.median(master[m]) * 1e3:.1f} ms", ratio(master, m),
            f"{statistics.median(machine[m]) * 1e3:.1f} ms", ratio(machine, m)]
           for m, v in medians.items()])
    print("(vs off: the median of the runs' ratios to the same run's \"off\")")


if __name__ == "__main__":
    main()
