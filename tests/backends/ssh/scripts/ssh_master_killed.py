"""A master with a pool and a process on the ssh hosts; it prints the ssh clients' pids
and the jobs' hosts and pids, then waits to be SIGKILLed by the test."""

import time

import _common
import ssh_targets

import fiber


def main() -> None:
    _common.setup()
    pool = fiber.Pool(6)
    results = pool.map(ssh_targets.where, range(12), chunksize=1)
    q = fiber.SimpleQueue()
    p = fiber.Process(target=ssh_targets.put_where, args=(q,))
    p.start()
    where = q.get()
    p.join(60)
    p = fiber.Process(target=ssh_targets.sleep, args=(600,))
    p.start()
    backend = fiber.backends.get_backend("ssh")
    deadline = time.monotonic() + _common.TIMEOUT
    while backend.status([p._job.handle])[p._job.handle.job_id].state.value != "running":
        if time.monotonic() > deadline:
            raise SystemExit("the sleeping job did not start")
        time.sleep(0.05)
    clients = [job.session.pid for job in backend._running]  # noqa: SLF001
    handles = [ws.process._job.handle for ws in pool._core.procs.values()]  # noqa: SLF001
    _common.result(clients=clients, hosts=sorted({h.host for h in handles}),
                   ran_on=sorted({host for _, host, _ in results} | {where[0]}))
    time.sleep(600)


if __name__ == "__main__":
    main()
