"""An AsyncManager on host 1 whose objects run in jobs on the hosts: handles read in
reverse order get their own results, a remote exception comes back through its handle,
and calls on different objects run at the same time."""

import os
import time

import _common

import fiber
import fiber.managers

from fiber_ci import netns


class Worker:
    def __init__(self, base):
        self.base = base

    def add(self, k):
        return self.base + k

    def where(self):
        return _common.my_ip(), os.getpid()

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def fail(self, message):
        raise ValueError(message)


class Remote(fiber.managers.AsyncManager):
    pass


Remote.register("Worker", Worker)


def main():
    hosts = _common.setup()
    manager = Remote()
    with netns.on_host(1):
        manager.start()
    try:
        workers = [manager.Worker(1000 * i) for i in range(3)]
        handles = [w.add(k) for k in range(5) for w in workers]
        reverse = [h.get(timeout=_common.TIMEOUT) for h in reversed(handles)]
        expected = [1000 * i + k for k in range(5) for i in range(3)][::-1]
        where = [h.get(timeout=_common.TIMEOUT) for h in [w.where() for w in workers]]
        t = time.monotonic()
        naps = [w.sleep(1.0) for w in workers]
        [h.get(timeout=_common.TIMEOUT) for h in naps]
        parallel_seconds = round(time.monotonic() - t, 3)
        h = workers[1].fail("remote failure")
        try:
            h.get(timeout=_common.TIMEOUT)
            error = None
        except ValueError as e:
            error = [type(e).__name__, str(e), "in fail" in getattr(e.__cause__, "tb", "")]
        _common.result(
            reverse_ok=reverse == expected, ips=sorted(ip for ip, _ in where),
            pids=len({pid for _, pid in where}), parallel_seconds=parallel_seconds,
            error=error, host_ips=[ip for _, ip in hosts.hosts])
    finally:
        manager.shutdown()


if __name__ == "__main__":
    main()
