"""Six processes on three hosts add to counters under locks: a managed counter under a
managed Lock (the manager on host 1), and a fiber.Value under its own lock (served by the
master). Both totals are exact."""

import time

import _common

import fiber

from fiber_ci import netns

WORKERS, N = 6, 30


def work(lock, counter, value, out):
    for _ in range(N):
        with lock:
            counter.value = counter.value + 1
        with value.get_lock():
            value.value += 1
    out.put(_common.my_ip())


def main():
    hosts = _common.setup()
    t0 = time.monotonic()
    with netns.on_host(1):
        manager = fiber.Manager()
    try:
        lock, counter = manager.Lock(), manager.Value("i", 0)
        value, out = fiber.Value("i", 0), fiber.Queue()
        procs = []
        for i in range(WORKERS):
            with netns.on_host(i % 3 + 1):
                p = fiber.Process(target=work, args=(lock, counter, value, out))
                p.start()
            procs.append(p)
        ips = sorted(out.get(timeout=_common.TIMEOUT * 2) for _ in procs)
        _common.join_all(procs)
        _common.result(
            managed=counter.value, value=value.value, expected=WORKERS * N,
            manager_address=manager.address, worker_ips=sorted(set(ips)),
            host_ips=[ip for _, ip in hosts.hosts], exitcodes=[p.exitcode for p in procs],
            seconds=round(time.monotonic() - t0, 2))
    finally:
        manager.shutdown()


if __name__ == "__main__":
    main()
