"""Cut host 2 off for a while (its veth down) during an ordered ``imap`` of 25 ms tasks
over six workers on three hosts, then reconnect it: how long the stream of results
stopped (the longest gap between two results), whether every result came once and in
order, and whether any worker was replaced. Host 2's tasks wait for it unless they run
again elsewhere once late (``pool_late_factor``: issue 45).

Usage: ``mh_cut_imap.py VETH SECONDS [LATE_FACTOR]``. Prints RESULT.
"""

import os
import sys
import threading
import time

import _common

import fiber

N_PER_S = 6 * 40  # six workers, 25 ms tasks


def task(x):
    time.sleep(0.025)
    return x, os.getpid()


def main():
    veth, seconds = sys.argv[1], float(sys.argv[2])
    _common.setup()
    if len(sys.argv) > 3:
        fiber.init(pool_late_factor=float(sys.argv[3]))
    n = int(N_PER_S * (seconds + 8))
    with fiber.Pool(6) as pool:
        before = sorted({pid for _, pid in pool.map(task, range(600), 1)})
        cut = threading.Timer(2.0, _common_link, (veth, False))
        heal = threading.Timer(2.0 + seconds, _common_link, (veth, True))
        got, gaps = [], []
        last = time.monotonic()
        cut.start()
        heal.start()
        for r in pool.imap(task, range(n), 1):
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            got.append(r)
        heal.join()
        copies = pool._core.service.copies
    _common.result(exact=[x for x, _ in got] == list(range(n)), n=n,
                   longest_gap=round(max(gaps[1:]), 2), copies=copies,
                   replaced=sorted({pid for _, pid in got} - set(before)))


def _common_link(veth, up):
    import subprocess
    subprocess.run(["ip", "link", "set", veth, "up" if up else "down"], check=True)


if __name__ == "__main__":
    main()
