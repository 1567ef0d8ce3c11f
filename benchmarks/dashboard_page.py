"""The dashboard's page at size: how long a real (headless) Chromium takes to fetch and
draw each update while a ``Pool(N)`` runs rounds, and what the dashboard adds to the
master's memory.

    .venv/bin/python benchmarks/dashboard_page.py [--workers 1024] [--seconds 20]

The program here is the master: a ``Pool(N)`` with the dashboard in its config runs
rounds of one 1 ms task per worker in a thread while Chromium (Debian's ``chromium``)
shows the page. Chromium is driven over its DevTools protocol on a pipe
(``--remote-debugging-pipe``: NUL-separated JSON on fds 3 and 4, no library): after
``--seconds`` of real time the page's own timings (``window.fiberTimings``: per update,
the fetch and JSON parse, then the drawing) are read back. A virtual time budget
(``--dump-dom``, as the tests use) would not do: it stops the clock the page reads.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List

from _common import table

import fiber
import fiber.dashboard


def task(_: int) -> None:
    time.sleep(0.001)


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class DevTools:
    """Chromium's DevTools protocol over ``--remote-debugging-pipe``."""

    def __init__(self, chromium: str, profile: str) -> None:
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # above 4, so that making them the child's fds 3 and 4 clobbers neither
        for name in ("to_browser_r", "from_browser_w"):
            fd = locals()[name]
            high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
            os.close(fd)
            if name == "to_browser_r":
                to_browser_r = high
            else:
                from_browser_w = high
        self._proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "about:blank"],
            # 3 and 4 kept too: the subprocess module closes the others after the dup2s
            pass_fds=(3, 4, to_browser_r, from_browser_w), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: (os.dup2(to_browser_r, 3), os.dup2(from_browser_w, 4)))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._ids = 0
        self._buffer = b""

    def call(self, method: str, session: str = "", **params: Any) -> Dict[str, Any]:
        self._ids += 1
        message: Dict[str, Any] = {"id": self._ids, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buffer:
                chunk = os.read(self._from_browser, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._ids:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})  # type: ignore[no-any-return]

    def close(self) -> None:
        self._proc.kill()
        self._proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("no chromium on PATH (apt-get install chromium)")
    fiber.init(dashboard="127.0.0.1:0")
    stop = threading.Event()
    rounds: List[float] = []
    with fiber.Pool(args.workers) as pool:
        pool.map(task, range(args.workers * 2), 1)  # every worker up

        def run_rounds() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                pool.map(task, range(args.workers), 1)
                rounds.append(time.perf_counter() - t)

        before = rss_mb()
        board = fiber.dashboard.serve_program("127.0.0.1:0")
        runner = threading.Thread(target=run_rounds, daemon=True)
        runner.start()
        with tempfile.TemporaryDirectory() as profile:
            tools = DevTools(chromium, profile)
            try:
                target = tools.call("Target.createTarget", url=board.url)["targetId"]
                session = tools.call("Target.attachToTarget", targetId=target,
                                     flatten=True)["sessionId"]
                time.sleep(args.seconds)
                value = tools.call("Runtime.evaluate", session,
                                   expression="JSON.stringify(window.fiberTimings || [])",
                                   returnByValue=True)["result"]["value"]
                rows = tools.call("Runtime.evaluate", session, returnByValue=True,
                                  expression="document.querySelectorAll('tr[data-worker]')"
                                             ".length")["result"]["value"]
            finally:
                tools.close()
        after = rss_mb()
        stop.set()
        runner.join()
    timings = json.loads(value)
    if not timings:
        sys.exit("the page recorded no update")
    fetch = sorted(t[0] for t in timings)
    draw = sorted(t[1] for t in timings)
    table(f"the dashboard's page, Pool({args.workers}) running rounds of 1 ms tasks, "
          f"{len(timings)} updates in {args.seconds:g} s, {rows} worker rows drawn",
          ["", "median", "max"],
          [["fetch and parse (ms)", f"{statistics.median(fetch):.0f}", f"{fetch[-1]:.0f}"],
           ["draw (ms)", f"{statistics.median(draw):.0f}", f"{draw[-1]:.0f}"],
           ["master RSS (MB)", f"{before:.0f} before", f"{after:.0f} after"],
           ["round (ms)", f"{statistics.median(rounds) * 1e3:.1f}", ""]])


if __name__ == "__main__":
    main()
