"""The dashboard of a program whose workers run on three hosts: each worker's job reports
its CPU and memory and answers for its stacks over its own connection to the master,
across the bridge; the jobs on the cluster are the netns backend's.

Prints RESULT: the workers' hosts, whether each reported its usage, the stack of one
busy worker, the cluster's view and /metrics' job lines.
"""

import http.client
import json
import os
import time
import urllib.parse

import _common

import fiber
import fiber.dashboard


def sleepy_user_function(seconds):
    time.sleep(seconds)
    return _common.my_ip()


def main():
    os.environ["FIBER_DASHBOARD"] = "127.0.0.1:0"  # read by the config at setup's init
    _common.setup()
    with fiber.Pool(3) as pool:
        ips = pool.map(sleepy_user_function, [0.05] * 30, 1)
        busy = pool.map_async(sleepy_user_function, [60] * 3, 1)
        board = fiber.dashboard.serve_program("127.0.0.1:0")  # the program's, started
        url = urllib.parse.urlsplit(board.url)

        def get(path):
            conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
            conn.request("GET", path, headers={"Authorization": f"Bearer {board.token}"})
            response = conn.getresponse()
            return response.status, response.read().decode()

        deadline = time.monotonic() + _common.TIMEOUT
        while True:
            snap = json.loads(get("/api/snapshot")[1])
            workers = snap["pools"][0]["workers"]
            reported = all(w.get("rss_mb", 0) > 1 for w in workers)
            running = all(w["state"] == "running" for w in workers)
            if (reported and running) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        status, stack = get("/api/stack?worker=" + workers[0]["name"])
        metrics = get("/metrics")[1]
        _common.result(
            task_ips=sorted(set(ips)), hosts=sorted({w["host"] for w in workers}),
            reported=reported, running=running, stack_status=status,
            stack_in_user_function="in sleepy_user_function" in stack,
            cluster=snap["cluster"]["jobs"],
            job_lines=sorted(line for line in metrics.splitlines()
                             if line.startswith("fiber_jobs{")))
        pool.terminate()
        del busy


if __name__ == "__main__":
    main()
