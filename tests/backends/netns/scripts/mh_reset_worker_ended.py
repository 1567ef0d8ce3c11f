"""A worker of a job of several dies while its job's connection is reset, in this order,
with real processes and signals: the job (its group process) is held (SIGSTOP) while
its two workers run a task each; one worker is SIGKILLed; the job's connection is
aborted (``ss -K`` in its host's namespace: the master gets a RST and waits for the
job); the job goes on (SIGCONT). The job reaps its worker first and cannot tell the
master (its connection is gone), connects again naming its live worker and, apart, the
dead one with its task (``resume_job``: the master loses the worker now, charged with
that task), then tells how the worker ended (``worker_ended``).

Expected: every result once; the task the dead worker ran is retried once (the pool's
``retried``), charged once (``pool_max_task_retries=1``: charged twice it would fail
with WorkerLostError), and named in the worker's warning.

Usage: ``mh_reset_worker_ended.py``. Prints RESULT.
"""

import logging
import os
import signal
import time

import _common

import fiber
from fiber.testing.conformance.support.waiting import hold, recorded_jobs, wait_until

TASK_S = 4.0  # each task: the stop, kill, reset and resume happen within one


def task(x):
    time.sleep(TASK_S)
    return x, os.getpid()


def main():
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)  # the job's resume is said at INFO
    out = {}
    with fiber.config.override(pool_max_task_retries=1), \
            fiber.Pool(2, workers_per_job=2) as pool:
        pool.wait_until_workers_up(timeout=_common.TIMEOUT)
        (job,) = recorded_jobs(pool)
        (holder,) = pool._core.service.holders.values()
        host = [name for name, _ in hosts.hosts].index(job.host) + 1
        result = pool.map_async(task, range(4), 1)
        wait_until(lambda: len(holder.pending) == 2, _common.TIMEOUT,
                   message="the job holds a task for each worker")
        time.sleep(0.5)  # both run theirs; the job waits for their results
        with open(f"/proc/{job.pid}/task/{job.pid}/children") as f:
            workers = [int(pid) for pid in f.read().split()]
        hold(job.pid)
        try:
            os.kill(workers[0], signal.SIGKILL)
            out["reset"] = _common.reset_host(hosts, host)
            wait_until(lambda: holder.resume_by > 0, _common.TIMEOUT,
                       message="the master waits for the job to connect again")
        finally:
            os.kill(job.pid, signal.SIGCONT)
        try:
            got = result.get(timeout=_common.TIMEOUT + 3 * TASK_S)
            out["values"] = [x for x, _ in got]
            out["pids"] = sorted({pid for _, pid in got})
        except Exception as e:
            out["error"] = repr(e)
        status = pool.status()
        out["retried"] = status.retried
        out["done"] = status.done
        out["killed"] = workers[0]
        out["job_alive"] = job.is_alive()
    _common.result(**out)


if __name__ == "__main__":
    main()
