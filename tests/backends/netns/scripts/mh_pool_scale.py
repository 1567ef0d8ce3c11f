"""A Pool of many workers (256 by default) spread over the hosts (four or more): a map
whose worker is killed with kill -9 mid-map delivers every result exactly once.

Usage: ``mh_pool_scale.py [WORKERS] [--measure]``. Prints ``RESULT <json>`` with what the
test checks and what the master holds with the pool connected (memory, descriptors by
kind). ``--measure`` adds what the scale notes quote: the traffic between the master and
the hosts while the pool idles (TCP keepalive only: counted on the bridge, whose counters
see exactly the master's packets), the master's CPU meanwhile and per task of a map.
"""

import collections
import os
import resource
import signal
import sys
import threading
import time

import _common

import fiber

WORKERS = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 256
MEASURE = "--measure" in sys.argv
IDLE_S = 10.0
ROUNDS = 8  # tasks per worker in the map that loses a worker
TASK_S = 0.1
START_TIMEOUT = 300.0  # every worker connected (fresh interpreters on a loaded machine)


def where(i):
    return _common.my_ip(), os.getpid(), i, i * i


def slow_where(i):
    time.sleep(TASK_S)
    return where(i)


def wait_for(predicate, timeout=_common.TIMEOUT, step=0.05):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def master_costs():
    """This process's resident memory (KB), open descriptors and TCP connections."""
    with open("/proc/self/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    kinds = collections.Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        kinds[target.split(":", 1)[0] if ":" in target else "file"] += 1
    return {"rss_kb": rss, "fds": sum(kinds.values()), "fd_kinds": dict(kinds)}


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def bridge_counters(root_ip):
    """Packets and bytes through the bridge that holds ``root_ip`` (netns.Hosts names it
    fbt<k>br for 10.202.<k>.1): (rx_packets, rx_bytes, tx_packets, tx_bytes)."""
    path = f"/sys/class/net/fbt{root_ip.split('.')[2]}br/statistics"
    values = []
    for name in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes"):
        with open(os.path.join(path, name)) as f:
            values.append(int(f.read()))
    return values


def idle_costs(hosts, workers):
    """The master's traffic and CPU per worker while the pool idles ``IDLE_S`` seconds."""
    c0, t0, cpu0 = bridge_counters(hosts.root_ip), time.monotonic(), cpu_seconds()
    time.sleep(IDLE_S)
    c1, t1, cpu1 = bridge_counters(hosts.root_ip), time.monotonic(), cpu_seconds()
    per = (t1 - t0) * workers
    rx_p, rx_b, tx_p, tx_b = (b - a for a, b in zip(c0, c1))
    return {"seconds": round(t1 - t0, 1), "cpu_s": round(cpu1 - cpu0, 3),
            "packets_in_per_worker_s": round(rx_p / per, 3),
            "packets_out_per_worker_s": round(tx_p / per, 3),
            "bytes_in_per_worker_s": round(rx_b / per, 1),
            "bytes_out_per_worker_s": round(tx_b / per, 1)}


def connected(core):
    with core.hub.lock:
        return sum(1 for ws in core.live_workers() if ws.connected)


def pick_victim(core, box):
    """A connected worker holding a task."""
    with core.hub.lock:
        busy = [ws for ws in core.live_workers() if ws.connected and ws.pending]
        if not busy:
            return False
        victim = busy[len(busy) // 2]
        box["victim"] = victim
        box["held"] = sorted(t.index for t in victim.pending.values())
        return True


def kill_when_a_quarter_is_done(core, quarter, box, stop):
    """SIGKILL a worker holding a task once the pool has finished ``quarter`` more tasks,
    by its own count. Not by the results the main thread has read: on loaded CPUs that
    reader lags, and by the time it read a quarter every task could be done, leaving no
    worker to kill (ci39's and e1031f5's CI runs)."""
    with core.hub.lock:
        start = core.service.done
    while not stop.is_set():
        with core.hub.lock:
            done = core.service.done - start
        if done >= quarter and pick_victim(core, box):
            box["killed_at"] = done
            box["pid"] = box["victim"].process.pid
            os.kill(box["pid"], signal.SIGKILL)
            return
        time.sleep(0.01)


def main():
    hosts = _common.setup()
    ip_of = dict(hosts.hosts)
    out = {"host_ips": [ip for _, ip in hosts.hosts], "workers": WORKERS}
    before = master_costs()
    t0 = time.monotonic()
    with fiber.Pool(WORKERS) as pool:
        core = pool._core
        out["all_connected"] = wait_for(lambda: connected(core) == WORKERS, START_TIMEOUT, 0.2)
        out["start_seconds"] = round(time.monotonic() - t0, 1)
        out["connected"] = connected(core)
        time.sleep(2)  # let the start-up settle before counting what the master holds
        out["master_before"], out["master_with_pool"] = before, master_costs()
        per_host = collections.Counter(ip_of.get(ws.process._job.handle.host, "?")
                                       for ws in core.live_workers())
        out["workers_per_host"] = dict(per_host)

        if MEASURE:
            out["idle"] = idle_costs(hosts, WORKERS)
        # one map over every worker: each index once, in order, on every host
        cpu0 = cpu_seconds()
        first = pool.map(where, range(WORKERS * 2), chunksize=1)
        out["first_cpu_ms_per_task"] = round((cpu_seconds() - cpu0) * 1000 / (WORKERS * 2), 3)
        out["first_ok"] = [(i, v) for _, _, i, v in first] == [
            (i, i * i) for i in range(WORKERS * 2)]
        out["first_ips"] = sorted({ip for ip, _, _, _ in first})

        # the map that loses a worker: results counted as they are delivered
        total = WORKERS * ROUNDS
        delivered = collections.Counter()
        values_ok = True
        ips = set()
        box = {}
        t1 = time.monotonic()
        stop = threading.Event()
        killer = threading.Thread(target=kill_when_a_quarter_is_done,
                                  args=(core, total // 4, box, stop), daemon=True)
        killer.start()
        for ip, _, i, v in pool.imap_unordered(slow_where, range(total), chunksize=1):
            delivered[i] += 1
            values_ok = values_ok and v == i * i
            ips.add(ip)
            if "pid" in box and "read_at_kill" not in box:
                box["read_at_kill"] = sum(delivered.values())
        stop.set()
        killer.join()
        out["map_seconds"] = round(time.monotonic() - t1, 1)
        out["killed_at"] = box.get("killed_at")
        out["read_at_kill"] = box.get("read_at_kill")
        out["victim_held"] = box.get("held", [])
        out["deliveries"] = sum(delivered.values())
        out["indices_ok"] = sorted(delivered) == list(range(total))
        out["delivered_twice"] = sorted(i for i, n in delivered.items() if n != 1)
        out["values_ok"] = values_ok
        out["map_ips"] = sorted(ips)
        victim = box.get("victim")
        if victim is not None:
            out["victim_exitcode_seen"] = wait_for(lambda: victim.exitcode is not None)
            out["victim_exitcode"] = victim.exitcode
        # the pool's own count: each task finished once (a second finish would go below 0)
        time.sleep(1)
        with core.hub.lock:
            out["outstanding_after"] = core.service.outstanding
        out["replaced"] = wait_for(lambda: connected(core) == WORKERS, 120, 0.2)
        third = pool.map(where, range(WORKERS), chunksize=1)
        out["third_ok"] = [v for _, _, _, v in third] == [i * i for i in range(WORKERS)]
        out["third_has_victim"] = box.get("pid") in {pid for _, pid, _, _ in third}
    out["seconds"] = round(time.monotonic() - t0, 1)
    _common.result(**out)


if __name__ == "__main__":
    main()
