"""Consumers on host 2 that each take some items from the master's queue and end, one
after another, while items are lent ahead to them (``queue_prefetch``, the default): a
consumer's end with a pull's answer on its way is a reset of its lease's connection (the
kernel resets a connection closed with data unread), which drops what the kernel had
not transmitted yet, its last ``ack``s among them. Each consumer sends what it took back
on a second queue; then the master takes what is left.

Expected: every item once, in all (taken by a consumer, or left in the queue), none
twice: before the lease settled at its process's end, the hub put back items a consumer
had taken (a CI run: 10 extra copies).

Usage: ``mh_consumers_end.py CONSUMERS TAKES`` (consumers, items each takes). Prints
RESULT.
"""

import os
import queue
import time

import _common

import fiber

from fiber_ci import netns


def consumer(q, out, takes):
    took = []
    for _ in range(takes):
        took.append(q.get(timeout=_common.TIMEOUT))
        time.sleep(0.001)
    out.put(took)


def main():
    consumers = int(os.sys.argv[1])
    takes = int(os.sys.argv[2])
    _common.setup()
    n = consumers * takes + 2000  # items left over: each consumer ends while some are lent
    q, out = fiber.Queue(), fiber.Queue()
    for i in range(n):
        q.put(i)
    taken = []
    exitcodes = []
    for c in range(consumers):
        with netns.on_host(2):
            child = fiber.Process(target=consumer, args=(q, out, takes), name=f"Consumer-{c}")
            child.start()
        taken.extend(out.get(timeout=_common.TIMEOUT * 4))
        child.join(_common.TIMEOUT)
        exitcodes.append(child.exitcode)
    left = []
    deadline = time.monotonic() + 60  # what a reset lease held comes back within it
    while time.monotonic() < deadline:
        try:
            left.append(q.get(timeout=2))
        except queue.Empty:
            if len(taken) + len(left) >= n:
                break
    seen = set()
    twice = sorted({x for x in taken + left if x in seen or seen.add(x)})
    _common.result(n=n, taken=len(taken), left=len(left), twice=twice[:20], n_twice=len(twice),
                   missing=sorted(set(range(n)) - seen)[:20],
                   n_missing=len(set(range(n)) - seen), exitcodes=exitcodes)


if __name__ == "__main__":
    main()
