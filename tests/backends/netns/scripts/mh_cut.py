"""Cut host 2 off for a while (its veth down: its processes keep running, no packet
passes) while a pool map runs over three hosts and a plain Process on host 2 echoes a
queue, then reconnect it. With the default ``heartbeat_timeout`` (30 s):

- a cut shorter than that heals: no worker lost or replaced, the Process goes on, every
  result once;
- a longer cut loses host 2's workers (their tasks go to the others, every result still
  once) and the Process, and the master says the Process is lost and why.

Usage: ``mh_cut.py VETH SECONDS[,SECONDS...]`` (VETH: host 2's bridge-side link; the test
passes it). Prints RESULT with, per cut, the deliveries and the workers seen.
"""

import os
import subprocess
import sys
import threading
import time

import _common

import fiber

from fiber_ci import netns

RATE = 6 * 40  # tasks a second: six workers, 25 ms tasks


def task(x):
    time.sleep(0.025)
    return x, os.getpid()


def echo(q_in, q_out):
    while True:
        item = q_in.get()
        if item is None:
            return
        q_out.put(item)


def link(veth, up):
    subprocess.run(["ip", "link", "set", veth, "up" if up else "down"], check=True)


def one_cut(pool, veth, seconds, q_in, q_out, child):
    n = int(RATE * (seconds + 6))  # still running when the link comes back
    got = []
    done = threading.Event()

    def consume():
        try:
            for r in pool.imap_unordered(task, range(n), 1):
                got.append(r)
        except BaseException as e:
            got.append(("error", repr(e)))
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    time.sleep(2)
    ids_before = {ws.worker_id for ws in pool._core.live_workers()}
    link(veth, False)
    t0 = time.monotonic()
    time.sleep(seconds)
    # the hosts of the workers started during the cut (replacements): none on the cut host
    started = sorted(ws.process._job.handle.host for ws in pool._core.live_workers()
                     if ws.worker_id not in ids_before and ws.process._job is not None
                     and ws.process._job.handle is not None)
    link(veth, True)
    healed = done.wait(seconds + 120)
    out = {"seconds": seconds, "n": n, "finished": healed,
           "map_seconds": round(time.monotonic() - t0, 1), "started_during_cut": started}
    values = sorted(x for x, _ in got if x != "error")
    out["exactly_once"] = values == list(range(n))
    out["deliveries"] = len(got)
    out["errors"] = [e for x, e in got if x == "error"]
    out["pids"] = sorted({pid for x, pid in got if x != "error"})
    out["child_alive"] = child.is_alive()
    out["child_exitcode"] = child.exitcode
    if child.is_alive():
        q_in.put(seconds)
        try:
            out["echo"] = q_out.get(timeout=60)
        except Exception as e:
            out["echo"] = repr(e)
    return out


def main():
    veth, cuts = sys.argv[1], [float(s) for s in sys.argv[2].split(",")]
    _common.setup()
    assert fiber.config.get_config().heartbeat_timeout == 30.0
    q_in, q_out = fiber.Queue(), fiber.Queue()
    with netns.on_host(2):
        child = fiber.Process(target=echo, args=(q_in, q_out), name="Echo")
        child.start()
    results = {"cuts": []}
    with fiber.Pool(6) as pool:
        warm = pool.map(task, range(600), 1)
        results["pids_before"] = sorted({pid for _, pid in warm})
        results["worker_hosts"] = sorted(ws.process._job.handle.host
                                         for ws in list(pool._core.procs.values()))
        q_in.put("warm")
        results["warm_echo"] = q_out.get(timeout=_common.TIMEOUT)
        for seconds in cuts:
            results["cuts"].append(one_cut(pool, veth, seconds, q_in, q_out, child))
    if child.is_alive():
        q_in.put(None)
    child.join(_common.TIMEOUT)
    results["child_exitcode"] = child.exitcode
    _common.result(**results)


if __name__ == "__main__":
    main()
