"""Reset every TCP connection of host 2 to host 1 (``ss -K``, as in mh_reset.py) while a
Process on host 2 calls a manager served on host 1: ``append(i)`` on a managed list, and
``+= 1`` on a managed namespace's counter, one call after another. A call is in flight
at each reset. Expected: each call runs once (the list is exactly 0..N-1, the counter
N), and the caller never sees an error: a call whose reply the reset cut off is asked
again on a new connection and answered, not run again.

Usage: ``mh_reset_manager.py RESETS [N]`` (how many resets, 1.5 s apart; calls, 100 by
default). Prints RESULT.
"""

import logging
import sys
import time

import _common

import fiber
import fiber.managers

from fiber_ci import netns

N = 100


def caller(items, ns, n, done):
    errors = []
    for i in range(n):
        try:
            items.append(i)
            ns.count += 1  # a get and a set: two calls
        except Exception as e:  # noqa: BLE001 - said in the result, not raised
            errors.append(repr(e))
            if len(errors) > 20:
                break
    done.put(errors)


def main():
    resets = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else N
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)
    manager = fiber.managers.SyncManager()
    with netns.on_host(1):
        manager.start()
    items, ns = manager.list(), manager.Namespace(count=0)
    done = fiber.Queue()
    with netns.on_host(2):
        child = fiber.Process(target=caller, args=(items, ns, n, done), name="Caller")
        child.start()
    while len(items) < 5:  # it calls before the first reset
        time.sleep(0.05)
    killed = []
    for _ in range(resets):
        time.sleep(1.5)
        killed.append(_common.reset_host(hosts, 2, dst=hosts.hosts[0][1]))
    try:
        errors = done.get(timeout=_common.TIMEOUT * 4)
    except Exception as e:  # noqa: BLE001 - said in the result
        errors = ["no end: " + repr(e)]
    child.join(_common.TIMEOUT)
    got = list(items)
    seen = set()
    twice = sorted({x for x in got if x in seen or seen.add(x)})
    _common.result(n=n, killed=killed, errors=errors, appended=len(got),
                   in_order=got == sorted(got), twice=twice[:20], n_twice=len(twice),
                   n_missing=len(set(range(n)) - seen), count=ns.count,
                   child_exitcode=child.exitcode)
    manager.shutdown()


if __name__ == "__main__":
    main()
