"""A master with a pool (more workers than all.q has slots: some stay pending) and a
process; it prints their job ids and waits to be SIGKILLed by the test."""

import time

import _common
import sge_targets

import fiber


def main() -> None:
    _common.setup()
    pool = fiber.Pool(8)  # 3 nodes x 2 slots: 6 run, 2 pend
    results = pool.map(sge_targets.where, range(12), chunksize=1)
    p = fiber.Process(target=sge_targets.sleep, args=(600,), daemon=True)
    p.start()
    handles = [ws.process._job.handle for ws in pool._core.procs.values()]
    handles.append(p._job.handle)
    _common.result(job_ids=[h.job_id for h in handles],
                   hosts=sorted({host for _, host, _ in results}))
    time.sleep(600)


if __name__ == "__main__":
    main()
