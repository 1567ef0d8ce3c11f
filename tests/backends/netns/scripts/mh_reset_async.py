"""Reset every TCP connection of a host to the job of an ``AsyncManager``'s object
(``ss -K``, as in mh_reset.py) while a Process on that host keeps 8 calls in flight on
the object (``add(i)``: 10 ms each, 300 of them). Expected: every call returns its own
result, none raises, and the object ran each once: the calls a reset cut off are
asked again on a new connection and answered there (run once), not failed.

Usage: ``mh_reset_async.py RESETS`` (how many resets, 1.5 s apart). Prints RESULT.
"""

import collections
import logging
import sys
import time

import _common

import fiber
import fiber.managers

from fiber_ci import netns

N = 300
WINDOW = 8


class Counter:
    def __init__(self):
        self.seen = []

    def add(self, i):
        time.sleep(0.01)
        self.seen.append(i)
        return 2 * i

    def where(self):
        return _common.my_ip()

    def got(self):
        return list(self.seen)


class Remote(fiber.managers.AsyncManager):
    pass


Remote.register("Counter", Counter)


def caller(counter, n, out):
    results, errors = {}, []
    pending = collections.deque()
    i = 0
    while i < n or pending:
        while i < n and len(pending) < WINDOW:
            pending.append((i, counter.add(i)))
            i += 1
        j, handle = pending.popleft()
        try:
            results[j] = handle.get(timeout=60)
        except Exception as e:  # noqa: BLE001 - said in the result, not raised
            errors.append(repr(e))
    out.put((results == {j: 2 * j for j in range(n)}, len(results), errors[:10]))


def main():
    resets = int(sys.argv[1])
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)
    manager = Remote()
    with netns.on_host(1):
        manager.start()
    counter = manager.Counter()
    ip = counter.where().get(timeout=_common.TIMEOUT)
    object_host = [h_ip for _, h_ip in hosts.hosts].index(ip) + 1
    caller_host = 3 if object_host == 2 else 2  # a host of its own: TCP to the object
    out = fiber.Queue()
    with netns.on_host(caller_host):
        child = fiber.Process(target=caller, args=(counter, N, out), name="Caller")
        child.start()
    while len(counter.got().get(timeout=_common.TIMEOUT)) < 20:
        time.sleep(0.05)
    killed = []
    for i in range(resets):
        if i:
            time.sleep(1.5)
        killed.append(_common.reset_host(hosts, caller_host, dst=ip))
    try:
        exact, count, errors = out.get(timeout=_common.TIMEOUT * 4)
    except Exception as e:  # noqa: BLE001 - said in the result
        exact, count, errors = False, 0, ["no end: " + repr(e)]
    child.join(_common.TIMEOUT)
    seen = counter.got().get(timeout=_common.TIMEOUT)
    twice = sorted({x for x in seen if seen.count(x) > 1})
    _common.result(n=N, killed=killed, exact=exact, count=count, errors=errors,
                   ran=len(seen), twice=twice[:20], n_missing=len(set(range(N)) - set(seen)),
                   child_exitcode=child.exitcode)
    manager.shutdown()


if __name__ == "__main__":
    main()
