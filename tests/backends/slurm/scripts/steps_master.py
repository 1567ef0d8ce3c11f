"""A master inside a Slurm allocation (run with ``sbatch -N3 -n6``): with the default
``slurm_mode=auto`` its processes are job steps (``srun --exact``) of the allocation."""

import os
import signal
import socket
import time

import _common
import slurm_targets

import fiber
from fiber.backends import get_backend


def main() -> None:
    _common.setup()
    backend = get_backend("slurm")
    out = {"mode": backend.mode(), "master_host": socket.gethostname(),
           "allocation": os.environ.get("SLURM_JOB_ID", "")}
    said = fiber.Process(target=slurm_targets.say, args=("a-step-says-hello",))
    said.start()
    said.join(_common.TIMEOUT)
    p = fiber.Process(target=slurm_targets.exit_with, args=(3,))
    p.start()
    p.join(_common.TIMEOUT)
    out["exit3"] = p.exitcode
    out["exit3_job_id"] = p._job.handle.job_id
    s = fiber.Process(target=slurm_targets.kill_self, args=(signal.SIGKILL,))
    s.start()
    s.join(_common.TIMEOUT)
    out["self_killed"] = s.exitcode
    for how in ("kill", "terminate"):
        k = fiber.Process(target=slurm_targets.sleep, args=(120,))
        k.start()
        deadline = time.monotonic() + _common.TIMEOUT
        while not k.host and time.monotonic() < deadline:  # connected: the step runs
            time.sleep(0.05)
        time.sleep(0.3)
        getattr(k, how)()
        k.join(_common.TIMEOUT)
        out[how] = k.exitcode
    q = fiber.Queue()
    g = fiber.Process(target=slurm_targets.put_host, args=(q,))
    g.start()
    out["child_host_and_job"] = list(q.get(timeout=_common.TIMEOUT))
    g.join(_common.TIMEOUT)
    with fiber.Pool(5) as pool:
        results = pool.map(slurm_targets.slow_square, range(40), chunksize=1)
    out["pool_ok"] = [r for r, _ in results] == [x * x for x in range(40)]
    out["pool_hosts"] = sorted({h for _, h in results})
    _common.result(**out)


if __name__ == "__main__":
    main()
