"""Cut a host off while its child runs: the child must end by itself (its lifeline to the
master drops), a child on another host must not notice, and the master's call to a queue
served on the cut-off host must fail rather than hang.

Protocol with the test: this script prints ``READY``, the test partitions host 2 and
writes ``CUT`` on stdin; the script measures from there."""

import select
import sys
import threading
import time

import _common

import fiber
from fiber.backends import get_backend

from fiber_ci import netns


def child(up):
    q = fiber.Queue()
    up.put((_common.my_ip(), q))
    time.sleep(120)


def main():
    hosts = _common.setup()
    up = fiber.Queue()
    procs = {}
    for i in (1, 2):
        with netns.on_host(i):
            procs[i] = fiber.Process(target=child, args=(up,))
            procs[i].start()
    served = dict(up.get(timeout=_common.TIMEOUT) for _ in procs)
    q2 = served[hosts.hosts[1][1]]  # the queue served by the child on host 2

    getter = {}
    connected, cut = threading.Event(), threading.Event()

    def blocked_get():
        # connect first (an established connection), then block once the host is cut off
        getter["size_before"] = q2.qsize()
        connected.set()
        cut.wait(90)
        try:
            getter["value"] = repr(q2.get(timeout=60))
        except BaseException as e:
            getter["error"] = type(e).__name__
        getter["at"] = time.monotonic()

    thread = threading.Thread(target=blocked_get, daemon=True)
    thread.start()
    if not connected.wait(_common.TIMEOUT):
        raise SystemExit("the master cannot reach the queue on host 2")
    print("READY", flush=True)
    if not select.select([sys.stdin], [], [], 60)[0] or sys.stdin.readline().strip() != "CUT":
        raise SystemExit("no CUT from the test")
    t0 = time.monotonic()
    cut.set()
    procs[2].join(20)
    child_seconds = time.monotonic() - t0
    thread.join(30)
    out = dict(
        cut_exitcode=procs[2].exitcode, cut_seconds=round(child_seconds, 2),
        other_alive=procs[1].is_alive(),
        master_get=getter.get("error") or getter.get("value", "still blocked"),
        master_get_seconds=round(getter["at"] - t0, 2) if "at" in getter else None,
    )
    procs[1].kill()
    procs[1].join(_common.TIMEOUT)
    out["other_exitcode"] = procs[1].exitcode
    # what the cut-off child said as it ended could not reach us: its own log has it
    out["cut_log"] = get_backend("netns").read_logs(procs[2].job_id)
    _common.result(**out)


if __name__ == "__main__":
    main()
