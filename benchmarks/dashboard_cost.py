"""What the dashboard costs a running pool: rounds of 1 ms tasks with the dashboard off,
on and idle, and on with a browser polling (a snapshot and /metrics every second).

    .venv/bin/python benchmarks/dashboard_cost.py [--workers N] [--block R] [--pairs P] [--runs K]
                                                  [--rate Q]

A round is one 1 ms task per worker, then a wait for all of them (the RL/ES step
pattern); rounds are timed once every worker has connected, in blocks of R rounds. The
browser is a process of its own, as a browser is, asking at a steady second's beat.

On two CPUs shared by 1,024 jobs, a pool's rounds take 100 to 165 ms from one program
to the next for no reason of its own, while within one program they hold steady. So the
costs are measured apart, each as closely as it can be:

* **polled against idle**, within one program: a program with the dashboard on runs P
  pairs of blocks, idle and polled in turn (ABBA, so that a drift over the run falls on
  both), the browser told at each block whether to ask. Each pair gives one ratio;
  printed, their mean with a 95% interval (a bootstrap over the pairs, all runs').
  ``--rate Q``: Q polls a second, each on another page of rows (a snapshot each), so
  that a cost too small to resolve at one poll a second is measured Q times over; the
  cost of one a second is printed too, as 1/Q of it (the polls' costs adding up).
* **idle against unmeasured**, within the same program: as many pairs of blocks idle
  and with the pool's /metrics histograms off (see `child`): what an idle dashboard
  that was looked at once adds to the pool's path (until a first look: nothing).
* **on and idle against off**, between programs: each run starts one program with the
  dashboard off and one with it on (their order alternating); the ratio of the "off"
  one's 2P blocks to the "on" one's P idle blocks of the first kind, a run each.

A block's figure is its mean round (the wall time of its R rounds over R: a poll that
slows two rounds of ten shows, where a median would hide it), and the CPU the block
took, of the master and of the whole machine (/proc/stat: every job, the browser and
whatever else runs, so run it on a quiet machine), each per round.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import select
import statistics
import subprocess
import sys
import time
import urllib.parse
from typing import Dict, List, Sequence, Tuple

from _common import table

import fiber

#: a block's figures: mean round, master CPU a round, machine CPU a round (seconds)
Block = Tuple[float, float, float]
FIGURES = ("mean round", "master CPU/round", "machine CPU/round")


def task(_: int) -> None:
    time.sleep(0.001)


def _machine_cpu() -> float:
    """CPU seconds all this machine's CPUs have spent busy since it started."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal: all but idle and iowait
    busy = sum(fields[:3]) + sum(fields[5:8])
    return busy / os.sysconf("SC_CLK_TCK")


def _ask(url: urllib.parse.SplitResult, token: str, page: int = 0) -> None:
    """What the page asks a second: one page of the workers' table (the first, 100 rows),
    then /metrics (served by that snapshot)."""
    for path in (f"/api/snapshot?workers={100 * page}:100", "/metrics"):
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
        conn.getresponse().read()
        conn.close()


def _browse(address: str, token: str, rate: int = 1) -> None:
    """The browser: another process (a thread of the program would take the GIL its hub
    needs, which a browser does not). It asks for what the page asks, ``rate`` times a
    second on a steady beat, while its last line on stdin was ``poll`` (until ``rest``);
    stdin's end ends it. The beat does not move with the blocks, so that over many blocks
    a polled second gets ``rate`` polls, neither more nor less. With ``rate`` above 1,
    each poll of a second asks for another page of rows (as ``rate`` viewers on as many
    pages would), so that each builds a snapshot: one of the same rows serves 0.5 s."""
    url = urllib.parse.urlsplit(address)
    polling, beat, polls = False, time.monotonic(), 0
    while True:
        beat += 1.0 / rate
        while (left := beat - time.monotonic()) > 0:
            if select.select([sys.stdin], [], [], left)[0]:
                line = sys.stdin.readline()
                if not line:
                    return
                polling = line.strip() == "poll"
        if polling:
            _ask(url, token, polls % rate)
            polls += 1


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


def _block(pool: fiber.Pool, workers: int, rounds: int) -> Block:
    cpu, machine, start = time.process_time(), _machine_cpu(), time.perf_counter()
    for _ in range(rounds):
        pool.map(task, range(workers), 1)
    return ((time.perf_counter() - start) / rounds, (time.process_time() - cpu) / rounds,
            (_machine_cpu() - machine) / rounds)


#: The "on" program's blocks, in groups of four (ABBA): idle, polled, polled, idle, then
#: idle, unmeasured, unmeasured, idle ("idle 2": the idle blocks of the second group).
GROUPS = (("idle", "polled", "polled", "idle"),
          ("idle 2", "unmeasured", "unmeasured", "idle 2"))


def child(dashboard: bool, workers: int, rounds: int, pairs: int, rate: int) -> None:
    """One program: with ``dashboard``, ``pairs`` pairs of blocks idle and polled, and as
    many idle and unmeasured (see `GROUPS`); without, 2 ``pairs`` blocks. Prints
    {kind: [block...]}.

    Idle and polled blocks run with the pool's /metrics histograms on (the task
    durations and latencies its hub records from a viewer's first look on: an idle
    dashboard that was looked at once), unmeasured ones with them off, as they are
    until that first look (set through the pool's own attribute before each block; an
    unmeasured block never follows a polled one, whose last poll would set it).
    On in every block, as no block can turn them off: the jobs' idle connections to the
    dashboard and its HTTP server's thread, which wakes twice a second."""
    if dashboard:
        fiber.init(dashboard="127.0.0.1:0")
    out: Dict[str, List[Block]] = {kind: [] for group in GROUPS for kind in group}
    with fiber.Pool(workers) as pool:
        _all_up(pool)
        if not dashboard:
            out["idle"] = [_block(pool, workers, rounds) for _ in range(2 * pairs)]
        else:
            from fiber.dashboard import serve_program

            board = serve_program("127.0.0.1:0")
            browser = subprocess.Popen([sys.executable, __file__, "--rate", str(rate),
                                        "--browse", board.address, board.token],
                                       stdin=subprocess.PIPE, text=True)
            assert browser.stdin is not None
            service = pool._core.service  # noqa: SLF001 - see above
            for b in range(4 * pairs):
                kind = GROUPS[b // 4 % 2][b % 4]
                browser.stdin.write("poll\n" if kind == "polled" else "rest\n")
                browser.stdin.flush()
                service.measuring = kind != "unmeasured"
                out[kind].append(_block(pool, workers, rounds))
            browser.stdin.close()
            browser.wait()
    print(json.dumps(out))


def _mean(blocks: Sequence[Block], figure: int) -> float:
    """The mean of figure ``figure`` (an index of `FIGURES`) over ``blocks``."""
    return statistics.fmean(b[figure] for b in blocks)


def _interval(ratios: Sequence[float], draws: int = 2000) -> Tuple[float, float, float]:
    """The mean of ``ratios`` and its 95% bootstrap interval."""
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return statistics.fmean(ratios), means[int(0.025 * draws)], means[int(0.975 * draws)]


def _said(ratios: Sequence[float]) -> str:
    mean, low, high = _interval(ratios)
    return f"{mean:.3f}x ({low:.3f}-{high:.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--block", type=int, default=20, help="rounds a block")
    parser.add_argument("--pairs", type=int, default=16,
                        help="pairs of each kind a run (even: whole ABBA groups)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1,
                        help="polls a second while polled (above 1: each on another page "
                             "of rows; the cost of one a second is printed too)")
    parser.add_argument("--child", choices=("off", "on"))
    parser.add_argument("--browse", nargs=2, metavar=("ADDRESS", "TOKEN"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.browse:
        _browse(*args.browse, rate=args.rate)
        return
    if args.child:
        child(args.child == "on", args.workers, args.block, args.pairs, args.rate)
        return
    env = {k: v for k, v in os.environ.items() if k != "FIBER_DASHBOARD"}
    runs: List[Dict[str, Dict[str, List[Block]]]] = []
    for run in range(args.runs):
        got = {}
        for mode in ("off", "on") if run % 2 == 0 else ("on", "off"):
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--workers",
                                  str(args.workers), "--block", str(args.block), "--pairs",
                                  str(args.pairs), "--rate", str(args.rate)],
                                 env=env, capture_output=True, text=True, check=True)
            got[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        runs.append(got)
    rows = []
    for i, figure in enumerate(FIGURES):
        polled = [p[i] / q[i] for r in runs for p, q in zip(r["on"]["polled"], r["on"]["idle"])]
        measured = [q[i] / p[i] for r in runs
                    for p, q in zip(r["on"]["unmeasured"], r["on"]["idle 2"])]
        idle = [_mean(r["on"]["idle"], i) / _mean(r["off"]["idle"], i) for r in runs]
        # the cost of one poll a second, if the cost grows with the polls (--rate)
        per_poll = [1 + (x - 1) / args.rate for x in polled]
        rows.append([figure,
                     " ".join(f"{_mean(r['off']['idle'], i) * 1e3:.1f}" for r in runs) + " ms",
                     _said(polled), _said(per_poll), _said(measured),
                     " ".join(f"{x:.3f}" for x in idle),
                     f"{statistics.median(idle):.3f}x"])
    table(f"Pool({args.workers}), rounds of 1 ms tasks in blocks of {args.block}; "
          f"{args.runs} runs, each an 'off' program and an 'on' one of {args.pairs} pairs "
          "of each kind",
          ["", "off, each run", f"polled ({args.rate}/s) vs idle (95%)",
           "a poll a second", "idle vs unmeasured (95%)",
           "idle vs off, each run", "median"], rows)
    print("(polled vs idle, idle vs unmeasured: the mean of every pair's ratio, same "
          "program; idle vs off: the 'on' program's idle blocks against the 'off' "
          "program of the same run)")


if __name__ == "__main__":
    main()
