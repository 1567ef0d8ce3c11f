"""Processes on three hosts: where they run, exit codes, kill -9, terminate."""

import os
import signal
import subprocess
import time

import _common

import fiber

from fiber_ci import netns


def report(q, code):
    q.put((_common.my_ip(), os.getpid(), netns.current_hosts().root_ip))
    raise SystemExit(code)


def ready_then_sleep(q, seconds):
    q.put(os.getpid())
    time.sleep(seconds)


def main():
    hosts = _common.setup()
    q = fiber.Queue()
    procs = []
    for i in (1, 2, 3):
        with netns.on_host(i):
            p = fiber.Process(target=report, args=(q, 10 + i))
            p.start()
        procs.append(p)
    seen = sorted(q.get(timeout=_common.TIMEOUT) for _ in procs)
    _common.join_all(procs)

    killed = []
    for i, how in ((2, "kill -9"), (3, "Process.kill"), (1, "Process.terminate")):
        with netns.on_host(i):
            p = fiber.Process(target=ready_then_sleep, args=(q, 120))
            p.start()
        child_pid = q.get(timeout=_common.TIMEOUT)  # it runs: it sent its pid
        out = subprocess.run(["ip", "netns", "pids", hosts.hosts[i - 1][0]], timeout=30,
                             capture_output=True, text=True).stdout
        in_ns = p.pid in [int(x) for x in out.split()]
        t0 = time.monotonic()
        if how == "kill -9":
            os.kill(p.pid, signal.SIGKILL)
        elif how == "Process.kill":
            p.kill()
        else:
            p.terminate()
        p.join(_common.TIMEOUT)
        killed.append(dict(how=how, host=i, exitcode=p.exitcode, pid_matches=child_pid == p.pid,
                           in_namespace=in_ns, seconds=round(time.monotonic() - t0, 3),
                           alive=p.is_alive()))

    _common.result(
        ips=[s[0] for s in seen],
        root_ips=sorted({s[2] for s in seen}),
        exitcodes=[p.exitcode for p in procs],
        handle_hosts=[p._job.handle.host for p in procs],
        process_hosts=[p.host for p in procs],  # what each job reported: its namespace
        expected_hosts=[h for h, _ in hosts.hosts],
        expected_ips=[ip for _, ip in hosts.hosts],
        killed=killed,
    )


if __name__ == "__main__":
    main()
