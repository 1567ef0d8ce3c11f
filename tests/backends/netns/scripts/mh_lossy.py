"""Everything at once over links that lose and delay packets (the test shapes them with
`Hosts.shape` before it starts this): for SECONDS seconds, a Pool(6) over three hosts runs
maps of 2,000 tasks, two Processes (hosts 1 and 3) update a manager's dict served on host
2, and a Process on host 3 moves items from a Queue to another. Nothing may be lost or
doubled, and no healthy peer may be declared lost (the test reads stderr for that).

Usage: ``mh_lossy.py SECONDS``. Prints RESULT.
"""

import os
import sys
import time

import _common

import fiber
import fiber.managers

from fiber_ci import netns


def square(x):
    return x * x, os.getpid()


def update(d, name, seconds, done):
    """Write keys ``name-0``, ``name-1``... for ``seconds``; put how many were written."""
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        d[f"{name}-{i}"] = i
        i += 1
    done.put((name, i))


def relay(q_in, q_out):
    while True:
        item = q_in.get()
        q_out.put(item)
        if item is None:
            return


def main():
    seconds = float(sys.argv[1])
    _common.setup()
    out = {"maps": 0, "maps_exact": True}
    manager = fiber.managers.SyncManager()
    with netns.on_host(2):
        manager.start()
    d = manager.dict()
    done, q_in, q_out = fiber.Queue(), fiber.Queue(), fiber.Queue()
    procs = []
    for host, name in ((1, "a"), (3, "b")):
        with netns.on_host(host):
            p = fiber.Process(target=update, args=(d, name, seconds, done), name=f"Updater-{name}")
            p.start()
            procs.append(p)
    with netns.on_host(3):
        mover = fiber.Process(target=relay, args=(q_in, q_out), name="Mover")
        mover.start()
    t0 = time.monotonic()
    sent = 0
    with fiber.Pool(6) as pool:
        pids = set()
        while time.monotonic() - t0 < seconds:
            got = pool.map(square, range(2000))
            out["maps"] += 1
            out["maps_exact"] &= [v for v, _ in got] == [x * x for x in range(2000)]
            pids |= {pid for _, pid in got}
            for _ in range(5):
                q_in.put(sent)
                sent += 1
        out["worker_pids"] = len(pids)
    q_in.put(None)
    moved = []
    while True:
        item = q_out.get(timeout=120)
        if item is None:
            break
        moved.append(item)
    out["queue_exact"] = moved == list(range(sent))
    out["queue_items"] = sent
    written = dict(done.get(timeout=120) for _ in procs)
    keys = set(d.keys())
    out["written"] = written
    out["dict_exact"] = all(f"{n}-{i}" in keys for n, k in written.items() for i in range(k))
    out["dict_extra"] = len(keys) - sum(written.values())
    for p in procs + [mover]:
        p.join(120)
    out["exitcodes"] = [p.exitcode for p in procs + [mover]]
    out["seconds"] = round(time.monotonic() - t0, 1)
    manager.shutdown()
    _common.result(**out)


if __name__ == "__main__":
    main()
