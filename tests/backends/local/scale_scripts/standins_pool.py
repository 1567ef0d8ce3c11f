"""A real master and N stand-in workers: python standins_pool.py N [K] (K: workers a
job, relayed on its connection; 1 by default).

Prints one line per check, the stand-in processes' ids, and 'ok' when the pool's
results are exact, the master counted N workers connected, each over its own TCP
connection from a stand-in's address, a function other than sleep_for is refused, and
every job reported its exit. With K > 1, the connections are one a job.
"""

import sys

import psutil

import fiber
from fiber.backends import get_backend

from fiber_ci import standins


def port_of(address: str) -> int:
    return int(address.split("/unix=")[0].rsplit(":", 1)[1])


def stand_in_connections(port: int) -> int:
    """The master's established TCP connections on ``port`` from a stand-in (127.0.1.x)."""
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port
               and c.raddr and c.raddr.ip.startswith("127.0.1."))


if __name__ == "__main__":
    n = int(sys.argv[1])
    per_job = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    standins.configure(processes=2, connecting=32)
    pool = fiber.get_context("standins").Pool(n, workers_per_job=per_job)
    seconds = [0.001 * (i % 7) for i in range(3 * n)]
    assert pool.map(standins.sleep_for, seconds, chunksize=1) == seconds  # a task each
    assert pool.map(standins.sleep_for, seconds, chunksize=5) == seconds  # chunks of 5
    assert pool.apply(standins.sleep_for, (0.002,)) == 0.002  # a call
    print("results exact")
    pool.wait_until_workers_up(timeout=120)  # the map may end before the last connects
    workers = pool.status().workers
    assert len(workers) == n and all(w.state == "idle" for w in workers), workers
    assert {w.host for w in workers} == {"standin-0", "standin-1"}, workers
    print(f"connected {len(workers)}")
    links = -(-n // per_job)
    assert stand_in_connections(port_of(pool._core.hub.address)) == links
    print(f"tcp {links}")
    try:
        pool.apply(abs, (-1,))
    except TypeError as e:
        assert "runs only fiber_ci.standins.sleep_for" in str(e), e
        print("refused abs")
    processes = pool._pool
    pool.close()
    pool.join()
    codes = {p.exitcode for p in processes}
    assert codes == {0}, codes
    print("exit reports 0")
    print("stand-ins " + " ".join(map(str, get_backend("standins").pids())))
    print("ok")
