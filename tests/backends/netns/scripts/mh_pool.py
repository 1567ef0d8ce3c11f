"""A Pool whose workers are spread over three hosts: tasks run on several hosts, results
come back complete and in order, also when a worker is killed with kill -9 mid-map."""

import os
import signal
import time

import _common

import fiber

N = 300
WORKERS = 6


def where(x):
    return _common.my_ip(), os.getpid(), x * x


def slow_where(x):
    time.sleep(0.02)
    return where(x)


def wait_for(predicate, timeout=_common.TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def main():
    hosts = _common.setup()
    ip_of = dict(hosts.hosts)  # namespace name -> its IP
    expected = [x * x for x in range(N)]
    out = {"host_ips": [ip for _, ip in hosts.hosts]}
    t0 = time.monotonic()
    with fiber.Pool(WORKERS) as pool:
        core = pool._core
        # tasks of 20 ms: spread over the workers as they connect, on every host
        first = pool.map_async(slow_where, range(N), 1).get(_common.TIMEOUT)
        out["first_ok"] = [v for _, _, v in first] == expected
        out["task_ips"] = sorted({ip for ip, _, _ in first})
        out["worker_ips"] = sorted({ip_of.get(ws.process._job.handle.host, "?")
                                    for ws in list(core.procs.values())})

        # kill -9, from the master's side, a worker that holds tasks of a running map
        r = pool.map_async(slow_where, range(N), 1)
        victim = None
        held = []

        def pick():  # once a fifth of the map is done
            nonlocal victim, held
            with core.hub.lock:
                if core.service.outstanding > N - N // 5:
                    return False
                busy = [ws for ws in core.live_workers() if ws.connected and len(ws.pending) > 0]
                if not busy:
                    return False
                victim = max(busy, key=lambda ws: len(ws.pending))
                held = [t.index for t in victim.pending.values()]
                return True

        out["picked"] = wait_for(pick)
        out["ready_at_kill"] = r.ready()
        out["outstanding_at_kill"] = core.service.outstanding
        out["victim_held"] = held
        out["victim_ip"] = ip_of.get(victim.process._job.handle.host, "?")
        victim_pid = victim.process.pid
        os.kill(victim_pid, signal.SIGKILL)
        second = r.get(60)
        out["second_ok"] = [v for _, _, v in second] == expected
        out["second_count"] = len(second)
        out["second_ips"] = sorted({ip for ip, _, _ in second})
        out["victim_seen_lost"] = wait_for(lambda: victim.exitcode is not None)
        out["victim_exitcode"] = victim.exitcode
        # the pool replaced it and works on
        out["replaced"] = wait_for(
            lambda: sum(1 for ws in core.live_workers() if ws.connected) == WORKERS)
        third = pool.map_async(where, range(60), 1).get(_common.TIMEOUT)
        out["third_ok"] = [v for _, _, v in third] == [x * x for x in range(60)]
        out["third_pids_include_victim"] = victim_pid in {pid for _, pid, _ in third}
    out["seconds"] = round(time.monotonic() - t0, 2)
    _common.result(**out)


if __name__ == "__main__":
    main()
