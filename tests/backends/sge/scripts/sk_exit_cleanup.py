"""Submit a running and a held (pending) job straight through the backend, then exit
normally (``normal``) or by an uncaught exception (``exception``): the backend's exit hook
must delete both (a pending job has no lifeline)."""

import sys
import time

import _common

import fiber
from fiber.backends import JobSpec, JobState, get_backend


def main() -> None:
    how = sys.argv[1]
    _common.setup()
    backend = get_backend("sge")
    (running,) = backend.submit([JobSpec(command=("sleep", "300"), name="cleanup-running")])
    with fiber.config.override(sge_extra_args="-h"):  # a user hold: pending until released
        (pending,) = backend.submit([JobSpec(command=("sleep", "300"),
                                             name="cleanup-pending")])
    deadline = time.monotonic() + _common.TIMEOUT
    while backend.status([running])[running.job_id].state != JobState.RUNNING:
        if time.monotonic() > deadline:
            sys.exit("the job did not start")
        time.sleep(0.1)
    states = backend.status([running, pending])
    _common.result(job_ids=[running.job_id, pending.job_id],
                   states=[states[h.job_id].state.name for h in (running, pending)])
    if how == "exception":
        raise RuntimeError("the master fails")


if __name__ == "__main__":
    main()
