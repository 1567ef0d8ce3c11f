"""The ES example at the seed's size across netns hosts: ``examples/es_bipedal.py``, run
unchanged as a user's program on the ``netns`` backend (one network namespace a host,
root only), its pool in jobs of ``--per-job`` workers (config ``pool_workers_per_job``:
the netns backend cannot tell a host's size, so the pool would choose jobs of one).

Prints each iteration's line as the example prints it, with the time since the start,
then the peak of this machine's memory in use (``MemTotal - MemAvailable``, sampled
every 0.5 s: the master, the jobs and their workers together) and how the program
ended (a SIGKILL here is usually the kernel's OOM killer). CPU bound on a small machine:
it reports times, not a speed-up.

Usage::

    python benchmarks/es_hosts.py --hosts 32 --per-job 64 -- \\
        --processes 2048 --pairs 1024 --iterations 3 --max-steps 100 --noise-mb 32
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from typing import List

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "es_bipedal.py")
#: The checkout's tests/: fiber_ci, the netns test hosts (not in the package)
TESTS = os.path.join(os.path.dirname(HERE), "tests")


def used_mb() -> float:
    """This machine's memory in use (MB): MemTotal less MemAvailable."""
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, value = line.split(":", 1)
            fields[name] = int(value.split()[0])
    return (fields["MemTotal"] - fields["MemAvailable"]) / 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=32, help="netns hosts (root)")
    ap.add_argument("--per-job", type=int, default=64, help="workers a job")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("example_args", nargs=argparse.REMAINDER,
                    help="after --: the example's own arguments")
    args = ap.parse_args()
    example_args: List[str] = [a for a in args.example_args if a != "--"]

    sys.path.insert(0, TESTS)
    from fiber_ci import netns

    base = used_mb()
    hosts = netns.Hosts(args.hosts).start()
    peak = [used_mb()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], used_mb())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    env = dict(os.environ, FIBER_BACKEND="netns", PYTHONUNBUFFERED="1",
               FIBER_POOL_WORKERS_PER_JOB=str(args.per_job),
               **{netns.HOSTS_ENV: hosts.to_env()})
    t0 = time.monotonic()
    print(f"{args.hosts} netns hosts, jobs of {args.per_job}; memory in use before: "
          f"{base / 1024:.1f} GB", flush=True)
    try:
        # the example as its own main program; the netns backend (fiber_ci's, not
        # an installed one) is registered first, as the test suite's plugin does
        boot = (f"import runpy, sys; sys.path.insert(0, {TESTS!r}); import fiber_ci.netns; "
                f"sys.argv = [{EXAMPLE!r}, *sys.argv[1:]]; "
                f"runpy.run_path({EXAMPLE!r}, run_name='__main__')")
        proc = subprocess.Popen([sys.executable, "-c", boot, *example_args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            print(f"[{time.monotonic() - t0:7.1f} s, {used_mb() / 1024:5.1f} GB] "
                  f"{line.rstrip()}", flush=True)
        code = proc.wait(timeout=args.timeout)
    finally:
        done.set()
        hosts.stop()
    print(f"\nexit code {code} after {time.monotonic() - t0:.1f} s; memory in use at its "
          f"peak {peak[0] / 1024:.1f} GB ({(peak[0] - base) / 1024:.1f} GB more than "
          "before)" + (": killed by SIGKILL (the OOM killer?)" if code == -9 else ""))


if __name__ == "__main__":
    main()
