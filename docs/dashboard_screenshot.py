"""Make docs/img/dashboard-64-workers.png, the screenshot of docs/dashboard.md: the real
dashboard following a ``Pool(64)`` (a map of 2,000 tasks of 0.3-0.9 s, on the local
backend), as a headless Chromium draws it once the map is under way.

    .venv/bin/python docs/dashboard_screenshot.py [--out PNG] [--after SECONDS]

Needs Chromium (Debian's ``chromium``, which CI installs for tests/backends/local/
test_dashboard.py). Run it again when the page changes: the image shows what the page
draws, and nothing checks that it still does.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

#: The program the dashboard follows: a pool of 64 workers mapping tasks of 0.3-0.9 s,
#: its dashboard on a free port (the address is the first line it writes on stderr).
PROGRAM = '''\
import random
import time

import fiber


def task(seconds):
    time.sleep(seconds)
    return seconds


if __name__ == "__main__":
    fiber.init(dashboard="127.0.0.1:0")
    durations = [random.Random(i).uniform(0.3, 0.9) for i in range(2000)]
    with fiber.Pool(64) as pool:
        pool.map(task, durations, chunksize=1)
'''


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no Chromium on the PATH: apt-get install chromium")


def _dashboard_url(stderr_path: str, deadline: float) -> str:
    """The address with its token that the program writes on stderr (to a file here)."""
    while time.monotonic() < deadline:
        with open(stderr_path, encoding="utf-8") as f:
            for line in f:
                if "dashboard at " in line:
                    return line.split("dashboard at ", 1)[1].strip()
        time.sleep(0.2)
    raise SystemExit("the program wrote no dashboard address within a minute")


def first_look(url: str) -> None:
    """Look at the program once, as a viewer's page does at its start: the pool keeps its
    task-time histograms from then on (the page shows them under the progress bar)."""
    parts = urllib.parse.urlsplit(url)
    with urllib.request.urlopen(f"{parts.scheme}://{parts.netloc}/api/snapshot?{parts.query}",
                                timeout=30) as answer:
        answer.read()


def screenshot(url: str, out: str, width: int, height: int) -> None:
    """The page at ``url`` as Chromium draws it once its script has polled a few times."""
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={width},{height}", "--virtual-time-budget=3000",
                        f"--screenshot={os.path.abspath(out)}", url],
                       check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "img", "dashboard-64-workers.png"))
    parser.add_argument("--after", type=float, default=12.0,
                        help="seconds of the map before the screenshot (default 12)")
    parser.add_argument("--size", default="1280x1500", help="the window, WIDTHxHEIGHT")
    args = parser.parse_args()
    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "pool64.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(PROGRAM)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
        stderr_path = os.path.join(work, "stderr")
        with open(stderr_path, "w") as stderr:
            program = subprocess.Popen([sys.executable, path], cwd=work, env=env,
                                       stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            url = _dashboard_url(stderr_path, time.monotonic() + 60)
            first_look(url)
            time.sleep(args.after)
            screenshot(url, args.out, width, height)
        finally:
            program.terminate()
            program.wait(60)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
