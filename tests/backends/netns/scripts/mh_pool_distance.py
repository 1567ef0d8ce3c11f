"""A Pool whose 4 workers are on hosts whose links the test delays (`Hosts.shape`, 50 ms
each way: a 100 ms round trip): an ordered ``imap`` of 20 ms tasks, how many tasks a
second it ran against the 200 that 4 workers can run, whether every result came once and
in order, and how many tasks each worker held at most (sampled from the master's side).

Usage: ``mh_pool_distance.py [TASKS [WORKERS_PER_JOB]]``. Prints RESULT.
"""

import sys
import threading
import time

import _common

import fiber

TASK_S = 0.02
WORKERS = 4


def work(x):
    time.sleep(TASK_S)
    return x * x


def main():
    _common.setup()
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
    per_job = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with fiber.Pool(WORKERS, workers_per_job=per_job) as pool:
        pool.map(work, range(WORKERS), 1)  # every worker connected, the function measured
        core = pool._core
        most = [0]
        stop = threading.Event()

        def sample():  # the most tasks a worker held, as the master's table says (a
            # job handed tasks as a whole: its record's, a worker each)
            while not stop.wait(0.005):
                with core.hub.lock:
                    held = [len(ws.pending) for ws in core.live_workers()]
                    held += [len(h.pending) // max(1, h.width)
                             for h in core.service.holders.values()]
                most[0] = max([most[0], *held])

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = time.monotonic()
        got = list(pool.imap(work, range(n), 1))
        seconds = time.monotonic() - t0
        stop.set()
        sampler.join()
        links = [ws.link or (ws.job.link if ws.job is not None else None)
                 for ws in core.live_workers()]  # a relayed worker's: its job's
        rtts = sorted(round(link.rtt * 1000, 1) for link in links if link is not None)
        relayed = sum(ws.relayed for ws in core.live_workers())
    _common.result(exact=got == [x * x for x in range(n)], rate=round(n / seconds, 1),
                   ideal=WORKERS / TASK_S, held_most=most[0], rtt_ms=rtts, relayed=relayed)


if __name__ == "__main__":
    main()
