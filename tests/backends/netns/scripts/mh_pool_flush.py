"""A Pool(1) whose worker is on a host whose link the test delays (`Hosts.shape`, 50 ms
each way): whether the result of a quick task held by the worker goes out before the
slow task handed to it in the same batch runs (issue 44 (10)), or waits for its end.

The worker is far (a measured 100 ms round trip), so the master lets it hold a slow task
(0.3 s) behind another (``fiber.pool._credit``: 1 + 100/300 = 2 tasks). Warmed up with
the slow function (the master and the worker know its length, and the link's), the
worker runs one slow call; meanwhile the program maps a quick function it has not called
yet (in one chunk: one task), then two slow calls. A function of unknown length waits
for an idle worker, so the quick task and the first slow one are handed together when
the running call's result comes in: the worker runs the quick task, then the slow one.

Usage: ``mh_pool_flush.py``. Prints RESULT: ``gap`` (seconds from the first slow task's
start, as the worker read the clock, to the quick map's result at the master), the
master's pending tables seen while the quick task was held, the results' checks and the
``fiber`` the worker imported.
"""

import threading
import time

import _common

import fiber

SLOW_S = 0.3


def slow(x):
    """Sleeps ``SLOW_S``; when it started (the hosts share the machine's clock)."""
    started = time.time()
    time.sleep(SLOW_S)
    return started


def quick(x):
    return x * x


def fiber_file(_):
    return fiber.__file__


def main():
    _common.setup()
    with fiber.Pool(1) as pool:
        worker_fiber = pool.apply(fiber_file, (0,))
        pool.map(slow, range(2), 1)  # its length and the link's round trip measured
        core = pool._core
        tables = []  # the pending tables the master had, each once, in order
        stop = threading.Event()

        def sample():
            while not stop.wait(0.002):
                with core.hub.lock:
                    table = tuple(task.call for ws in core.live_workers()
                                  for task in ws.pending.values())
                if not tables or tables[-1] != table:
                    tables.append(table)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        done = []
        first = pool.apply_async(slow, (0,))
        quicks = pool.map_async(quick, range(20), 20, callback=lambda _: done.append(
            time.time()))
        slows = pool.map_async(slow, range(2), 1)
        with core.hub.lock:
            queued = [task.call for task in core.service.queue]
        got_quick = quicks.get(_common.TIMEOUT)
        starts = slows.get(_common.TIMEOUT)
        first.get(_common.TIMEOUT)
        stop.set()
        sampler.join()
        rtts = [round(ws.link.rtt * 1000, 1) for ws in core.live_workers()
                if ws.link is not None]
    _common.result(gap=round(done[0] - starts[0], 3), quick_exact=got_quick == [
        x * x for x in range(20)], slow_apart=round(starts[1] - starts[0], 3),
        queued=queued, tables=tables, rtt_ms=rtts, worker_fiber=worker_fiber)


if __name__ == "__main__":
    main()
