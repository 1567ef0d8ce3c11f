"""What the dashboard costs a running pool: rounds of 1 ms tasks with the dashboard off,
on and idle, and on with a browser's polling (a snapshot and /metrics every second),
in one run, alternating, each in a fresh process.

    .venv/bin/python benchmarks/dashboard_cost.py [--workers N] [--rounds R] [--runs K]

A round is one 1 ms task per worker, then a wait for all of them (the RL/ES step
pattern). Printed: the median round time of each mode and its ratio to "off".
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

from _common import table

import fiber

MODES = ("off", "on, idle", "on, polled")


def task(_: int) -> None:
    time.sleep(0.001)


def _poll(address: str, token: str, stop: threading.Event) -> None:
    url = urllib.parse.urlsplit(address)
    while not stop.wait(1.0):
        for path in ("/api/snapshot", "/metrics"):
            conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
            conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
            conn.getresponse().read()
            conn.close()


def child(mode: str, workers: int, rounds: int) -> None:
    if mode != "off":
        fiber.init(dashboard="127.0.0.1:0")
    stop = threading.Event()
    with fiber.Pool(workers) as pool:
        pool.map(task, range(workers * 4), 1)  # every worker up
        if mode == "on, polled":
            from fiber.dashboard import serve_program

            board = serve_program("127.0.0.1:0")
            threading.Thread(target=_poll, args=(board.address, board.token, stop),
                             daemon=True).start()
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            pool.map(task, range(workers), 1)
            times.append(time.perf_counter() - t)
        stop.set()
    print(json.dumps(statistics.median(times)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", choices=MODES)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.workers, args.rounds)
        return
    medians: dict = {m: [] for m in MODES}
    env = {k: v for k, v in os.environ.items() if k != "FIBER_DASHBOARD"}
    for _ in range(args.runs):
        for mode in MODES:
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--workers",
                                  str(args.workers), "--rounds", str(args.rounds)],
                                 env=env, capture_output=True, text=True, check=True)
            medians[mode].append(float(out.stdout.strip().splitlines()[-1]))
    off = statistics.median(medians["off"])
    table(f"Pool({args.workers}), rounds of 1 ms tasks, {args.runs} runs of {args.rounds}",
          ["dashboard", "median round", "vs off"],
          [[m, f"{statistics.median(v) * 1e3:.2f} ms", f"{statistics.median(v) / off:.3f}x"]
           for m, v in medians.items()])


if __name__ == "__main__":
    main()
