"""Issue 48: an on-path writer on host 1's link (armed by the test: `Hosts.tamper`) flips
one byte of the stream towards the master and one of the stream from it, each after its
connection's first bytes, while a pool of three workers (one a host) maps tasks whose
arguments and results are 64 KiB of data. Prints how many arguments reached a worker
altered (their digest), how many result bytes came back wrong, which workers ran the
map, and how long the map took.

Usage: ``mh_tamper.py TASKS``. Prints RESULT.
"""

import hashlib
import logging
import os
import sys
import time

import _common

import fiber

SIZE = 64 * 1024


def blob(i):
    """Task ``i``'s data: 64 KiB that differ from any other task's at every place."""
    return b"".join(hashlib.sha256(b"%d-%d" % (i, k)).digest() for k in range(SIZE // 32))


def work(arg):
    """The digest of what came, and it reversed (a result as large as the argument)."""
    i, data = arg
    return i, hashlib.sha256(data).digest(), data[::-1], _common.my_ip(), os.getpid()


def pid_after(seconds):
    time.sleep(seconds)
    return os.getpid()


def main():
    n = int(sys.argv[1])
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)
    blobs = [blob(i) for i in range(n)]
    out = {}
    with fiber.Pool(3) as pool:
        pids = set()
        for _ in range(50):  # until every worker ran a task (no data yet: nothing altered)
            pids |= set(pool.map(pid_after, [0.01] * 6, chunksize=1))
            if len(pids) == 3:
                break
        out["pids_before"] = sorted(pids)
        t0 = time.monotonic()
        got = pool.map(work, [(i, blobs[i]) for i in range(n)], chunksize=1)
        out["seconds"] = round(time.monotonic() - t0, 2)
        out["order"] = [g[0] for g in got] == list(range(n))
        out["args_altered"] = [i for i, digest, *_ in got
                               if digest != hashlib.sha256(blobs[i]).digest()]
        out["bytes_altered"] = sum(sum(a != b for a, b in zip(result, blobs[i][::-1]))
                                   for i, _, result, *_ in got)
        out["hosts"] = sorted({g[3] for g in got})
        out["pids"] = sorted({g[4] for g in got})
        again = pool.map(pid_after, [0.01] * 30, chunksize=1)
        out["pids_after"] = sorted(set(again))
    out["host1"] = hosts.hosts[0][1]
    _common.result(**out)


if __name__ == "__main__":
    main()
