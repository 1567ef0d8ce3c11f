"""One Queue (served by the master), three writers on three hosts, two readers on two
hosts: every item arrives exactly once; with ``--prefetch 0`` (nothing lent ahead) each
reader also gets each writer's items in the order they were put.

Usage: ``mh_queue.py [--prefetch N]``. Prints RESULT."""

import os
import sys
import time

import _common

import fiber

from fiber_ci import netns

PER_WRITER = 300
STOP = "stop"


def writer(q, w, n):
    for j in range(n):
        q.put((w, j, b"x" * (j % 7) * 100))


def reader(q, out, r):
    got = []
    while True:
        item = q.get(timeout=_common.TIMEOUT)
        if item == STOP:
            break
        got.append(item[:2])
    out.put((r, _common.my_ip(), got, q._lease(make=False) is not None))


def main():
    if "--prefetch" in sys.argv:  # before fiber.init reads the environment
        os.environ["FIBER_QUEUE_PREFETCH"] = sys.argv[sys.argv.index("--prefetch") + 1]
    hosts = _common.setup()
    q, out = fiber.Queue(), fiber.Queue()
    t0 = time.monotonic()
    readers, writers = [], []
    for r, host in ((0, 2), (1, 3)):
        with netns.on_host(host):
            p = fiber.Process(target=reader, args=(q, out, r))
            p.start()
        readers.append(p)
    for w, host in ((0, 1), (1, 2), (2, 3)):
        with netns.on_host(host):
            p = fiber.Process(target=writer, args=(q, w, PER_WRITER))
            p.start()
        writers.append(p)
    _common.join_all(writers, 60)
    for _ in readers:
        q.put(STOP)
    results = sorted(out.get(timeout=_common.TIMEOUT) for _ in readers)
    _common.join_all(readers)
    items = [tuple(x) for _, _, got, _ in results for x in got]
    per_reader = [len(got) for _, _, got, _ in results]
    # each writer's items reach one reader in the order they were put
    ordered = all(
        [j for w2, j in got if w2 == w] == sorted(j for w2, j in got if w2 == w)
        for _, _, got, _ in results for w in range(3))
    _common.result(
        total=len(items), unique=len(set(items)), expected=3 * PER_WRITER,
        missing=sorted(set((w, j) for w in range(3) for j in range(PER_WRITER)) - set(items))[:10],
        per_reader=per_reader, reader_ips=[ip for _, ip, _, _ in results],
        host_ips=[ip for _, ip in hosts.hosts], ordered=ordered,
        exitcodes=[p.exitcode for p in writers + readers],
        lent=any(r[3] for r in results),
        seconds=round(time.monotonic() - t0, 2))


if __name__ == "__main__":
    main()
