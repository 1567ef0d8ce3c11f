"""A Queue served by the master and its consumer on host 1, whose link the test delays
(`Hosts.shape`, 50 ms each way: a 100 ms round trip): how many items a second the
consumer gets, one item per ``get`` (``queue_prefetch = 0``) and with items lent ahead
(the default), and whether every item came once and in order.

Usage: ``mh_queue_distance.py``. Prints RESULT.
"""

import time

import _common

import fiber

from fiber_ci import netns


def consume(q, out, n):
    got = [q.get(timeout=120)]  # the first get also makes the connection
    t = time.monotonic()
    got += [q.get(timeout=120) for _ in range(n - 1)]
    out.put((got, (n - 1) / (time.monotonic() - t)))


def run(prefetch, n):
    with fiber.config.override(queue_prefetch=prefetch):
        q, out = fiber.Queue(), fiber.Queue()
        for i in range(n):
            q.put(i)
        with netns.on_host(1):
            p = fiber.Process(target=consume, args=(q, out, n))
            p.start()
        got, rate = out.get(timeout=300)
        p.join(60)
    return {"exact": got == list(range(n)), "rate": round(rate, 1), "exitcode": p.exitcode}


def main():
    _common.setup()
    plain = run(0, 31)
    lent = run(16, 1001)
    _common.result(plain=plain, lent=lent)


if __name__ == "__main__":
    main()
