"""A program for tests/backends/local/test_ps_local.py: one Process, ``Sleeper``, that
sleeps; it prints ``READY <json>`` and waits until it is stopped (or 120 s)."""

import json
import time

import fiber

if __name__ == "__main__":
    p = fiber.Process(target=time.sleep, args=(120,), name="Sleeper")
    p.start()
    print("READY " + json.dumps({"job": p.job_id, "pid": p.pid}), flush=True)
    time.sleep(120)
