"""Reset every TCP connection of host 2 to the master (``ss -K``, as in mh_reset.py)
while a Process on host 2 takes numbered items from a queue of the master's, with items
lent ahead to it (``queue_prefetch``, the default) and items the master keeps putting.
The consumer sends each item it took back on a second queue, with its own count.
Expected: every item reaches the consumer exactly once (none taken twice because a
reset's ``ack`` was resent after its loan was given back, none lost because a ``get``'s
reply was lost), in the order of the queue for each of its takes, and the consumer never
sees an error.

Usage: ``mh_reset_consumer.py RESETS [N]`` (how many resets, 1.5 s apart; items, 6,000 by
default). Prints RESULT.
"""

import logging
import os
import time

import _common

import fiber

from fiber_ci import netns

N = 6000  # items by default; the consumer takes one every ~1 ms: the resets fall inside


def consumer(q, out, n):
    errors = []
    took = 0
    while took < n:
        try:
            item = q.get(timeout=_common.TIMEOUT)
        except Exception as e:  # noqa: BLE001 - said in the result, not raised
            errors.append(repr(e))
            if len(errors) > 20:
                break
            continue
        took += 1
        out.put(item)
        time.sleep(0.001)
    out.put(("done", took, errors))



def main():
    resets = int(os.sys.argv[1])
    n = int(os.sys.argv[2]) if len(os.sys.argv) > 2 else N
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)
    q, out = fiber.Queue(), fiber.Queue()
    for i in range(n // 2):  # a backlog: the consumer's handle borrows ahead
        q.put(i)
    with netns.on_host(2):
        child = fiber.Process(target=consumer, args=(q, out, n), name="Consumer")
        child.start()
    got = [out.get(timeout=_common.TIMEOUT)]  # it takes items before the first reset
    killed = []
    put = n // 2
    last_reset = time.monotonic()
    for _ in range(resets):
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:  # new items meanwhile, some lent, some not
            if put < n:
                q.put(put)
                put += 1
            time.sleep(0.0005)
        killed.append(_common.reset_host(hosts, 2))
        last_reset = time.monotonic()
    while put < n:
        q.put(put)
        put += 1
    end = None
    try:
        while end is None:
            x = out.get(timeout=_common.TIMEOUT)
            if isinstance(x, tuple) and x and x[0] == "done":
                end = x
            else:
                got.append(x)
    except Exception as e:  # noqa: BLE001 - said in the result
        end = ("missing", len(got), [repr(e)])
    child.join(_common.TIMEOUT)
    left = q.qsize()
    left_items = []
    for _ in range(min(left, 20)):
        try:
            left_items.append(q.get(timeout=5))
        except Exception as e:  # noqa: BLE001 - said in the result
            left_items.append(repr(e))
    seen = set()
    twice = sorted({x for x in got if x in seen or seen.add(x)})
    _common.result(n=n, killed=killed, took=end[1], errors=end[2], twice=twice[:20],
                   n_twice=len(twice), missing=sorted(set(range(n)) - seen)[:20],
                   n_missing=len(set(range(n)) - seen), left=left, left_items=left_items,
                   child_exitcode=child.exitcode,
                   after_last_reset_s=round(time.monotonic() - last_reset, 1))


if __name__ == "__main__":
    main()
