"""Reset every TCP connection of host 2 to the master (``ss -K`` in host 2's namespace:
the kernel aborts each socket and the master's end gets a RST, as from a middlebox or a
conntrack flush) while a pool map runs over three hosts and a plain Process on host 2
puts a numbered item on a queue of the master's every 4 ms; each process lives on.
Expected: host 2's workers connect again and resume (no worker lost or replaced, every
result once); the Process keeps its lifeline (it does not end as if its program were
gone), its puts arrive each once, in order (those the reset lost are sent again on the
next connection: fiber.transport._resend; a put under way goes on a new one), and the
lock it holds across the resets stays its own (a reset process is not a dead holder).

With PER_JOB > 1 the pool's workers come in jobs of that many (issue 45): host 2's job
relays its workers on one connection, which connects again and takes them all back.

Usage: ``mh_reset.py RESETS [PER_JOB]`` (how many resets, 3 s apart). Prints RESULT.
"""

import logging
import os
import threading
import time

import _common

import fiber
from fiber.transport.server import REANCHOR_WAIT_S

from fiber_ci import netns

N = 3000  # tasks of 10 ms on six workers: ~5 s, resets included
PUTS = 3000  # one every 4 ms (and the put's own time): longer than the resets


def task(x):
    time.sleep(0.01)
    return x, os.getpid()


def producer(q, n, lock, hold):
    with lock:  # held across the resets: its process lives, so nobody may take it
        for i in range(n):
            q.put(i)
            time.sleep(0.004)
        time.sleep(hold)



def main():
    resets = int(os.sys.argv[1])
    per_job = int(os.sys.argv[2]) if len(os.sys.argv) > 2 else 1
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)
    q = fiber.Queue()
    lock = fiber.Lock()
    with netns.on_host(2):
        # it holds the lock past the check below (the first reset + REANCHOR_WAIT_S + 1)
        child = fiber.Process(target=producer, args=(q, PUTS, lock, REANCHOR_WAIT_S + 3),
                              name="Producer")
        child.start()
    out = {"killed": []}
    with fiber.Pool(6, workers_per_job=per_job) as pool:
        pids = set()
        for _ in range(20):  # until every worker ran a task (host 2's may be far)
            pids |= {pid for _, pid in pool.map(task, range(300), 1)}
            if len(pids) == 6:
                break
        out["pids_before"] = sorted(pids)
        got = []
        done = threading.Event()

        def consume():
            try:
                got.extend(pool.imap_unordered(task, range(N), 1))
            except BaseException as e:
                got.append(("error", repr(e)))
            done.set()

        # the producer holds its lock and puts before the first reset: a call of its
        # under way (its start, the lock's acquire) would fail with ConnectionLost
        items = [q.get(timeout=_common.TIMEOUT)]
        threading.Thread(target=consume, daemon=True).start()
        first_reset = None
        for _ in range(resets):
            time.sleep(1.0)
            first_reset = first_reset or time.monotonic()
            out["killed"].append(_common.reset_host(hosts, 2))
            time.sleep(2.0)
        # past the server's wait for a reset process to anchor again: the lock is
        # still the producer's (its process lives), not freed as a dead holder's
        time.sleep(max(0.0, first_reset + REANCHOR_WAIT_S + 1 - time.monotonic()))
        out["lock_taken_from_a_live_holder"] = lock.acquire(block=False)
        out["finished"] = done.wait(120)
        values = sorted(x for x, _ in got if x != "error")
        out["exactly_once"] = values == list(range(N))
        out["errors"] = [e for x, e in got if x == "error"]
        out["pids"] = sorted({pid for x, pid in got if x != "error"})
        out["states"] = sorted({w.state for w in pool.status().workers})
    try:
        while len(items) < PUTS:
            items.append(q.get(timeout=_common.TIMEOUT))
    except Exception as e:
        items.append(repr(e))
    out["puts_exact"] = items == list(range(PUTS))
    out["puts_seen"] = len(items)
    if not out["puts_exact"]:
        out["puts_wrong"] = [(i, x) for i, x in enumerate(items) if x != i][:5]
    out["lock_free_after"] = lock.acquire(timeout=_common.TIMEOUT)
    child.join(_common.TIMEOUT)
    out["child_exitcode"] = child.exitcode
    _common.result(**out)


if __name__ == "__main__":
    main()
