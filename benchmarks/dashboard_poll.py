"""What one poll of the dashboard costs the master of a busy ``Pool(N)``: the CPU time and
wall time of the dashboard's thread to build what the page asks for every second (its
snapshot, with one page of each worker table, as JSON) and what a Prometheus scrape
asks for (``/metrics``), while the pool runs rounds of one 1 ms task per worker; and the
same with every row of the tables (what the page asked for before it paged), and a
scrape of /metrics alone (a Prometheus that polls when no page has just been served).

    .venv/bin/python benchmarks/dashboard_poll.py [--workers 1024] [--rounds 60] [--profile]

``--profile``: also where the page's polls spend their CPU (cProfile timed by the polling
thread's CPU clock: waits for the hub's lock do not count).

This is the cost `dashboard_cost.py` looks for in round times, measured where it is
spent: on this VM, round times move by ±5% from one run of 12 to the next, more than a
poll's share of them, while a poll's CPU time is read off the thread that spends it.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import threading
import time
from typing import Dict, List, Optional, Tuple

from _common import table
from dashboard_cost import _all_up, task

import fiber
from fiber import dashboard
from fiber.dashboard import _metrics


def _poll(board: dashboard.Dashboard, rows: Optional[Tuple[int, int]]) -> Tuple[float, float, int]:
    """One poll as the page and a scrape make it, nothing cached: (CPU ms, wall ms, bytes
    of the JSON; of /metrics' text for rows ``(0, 0)``, a scrape alone)."""
    cpu, wall = time.thread_time(), time.perf_counter()
    board._cached = {}  # noqa: SLF001 - a fresh snapshot, as a poll every second gets
    body = "" if rows == (0, 0) else \
        dashboard._json(board.snapshot(rows))  # noqa: SLF001 - the handler's own encoder
    text = _metrics.render(board.snapshot((0, 0)))
    return (time.thread_time() - cpu) * 1e3, (time.perf_counter() - wall) * 1e3, \
        len(body or text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--profile", action="store_true",
                        help="print the functions the page's polls spend most in")
    args = parser.parse_args()
    profile = cProfile.Profile(time.thread_time) if args.profile else None
    fiber.init(dashboard="127.0.0.1:0")
    modes = {"a page (100 rows)": (0, 100), "every row": None, "/metrics alone": (0, 0)}
    polls: Dict[str, List[Tuple[float, float, int]]] = {name: [] for name in modes}
    with fiber.Pool(args.workers) as pool:
        _all_up(pool)
        board = dashboard.serve_program("127.0.0.1:0")
        stop = threading.Event()

        def poller() -> None:
            turn = 0
            while not stop.wait(0.5):  # the modes alternate, two polls a second
                name = list(modes)[turn % len(modes)]
                profiled = profile is not None and turn % len(modes) == 0
                if profiled:
                    profile.enable()  # type: ignore[union-attr]
                polls[name].append(_poll(board, modes[name]))
                if profiled:
                    profile.disable()  # type: ignore[union-attr]
                turn += 1

        thread = threading.Thread(target=poller, daemon=True)
        thread.start()
        rounds = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            pool.map(task, range(args.workers), 1)
            rounds.append(time.perf_counter() - start)
        stop.set()
        thread.join()
    rows: List[List[str]] = []
    for name, got in polls.items():
        rows.append([name, str(len(got)), f"{statistics.median(p[0] for p in got):.1f} ms",
                     f"{statistics.median(p[1] for p in got):.0f} ms",
                     f"{statistics.median(p[2] for p in got) / 1000:.0f} KB"])
    table(f"Pool({args.workers}) running rounds of 1 ms tasks (median round "
          f"{statistics.median(rounds) * 1e3:.1f} ms, polled twice a second): one poll "
          "(page + /metrics)",
          ["table rows", "polls", "CPU, median", "wall, median", "body"], rows)
    if profile is not None:  # (its own overhead inflates the many small calls)
        print(f"\nwhere {len(polls[list(modes)[0]])} polls with a page spent their time:")
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
