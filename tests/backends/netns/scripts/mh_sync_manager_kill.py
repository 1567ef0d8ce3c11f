"""A manager on host 1 is killed while a process on host 2 and the master are blocked in
calls on its objects: both get ConnectionLost within seconds, nothing hangs.

``--silent VETH`` (host 1's bridge-side link): host 1 is cut off first, then the
manager killed (a Kubernetes pod whose network goes before its process): no end
reaches the callers, only silence, and they get ConnectionLost once the grace
(``heartbeat_timeout``) is out, not a second grace later for the connection they
then try (which finds no host)."""

import subprocess
import sys
import threading
import time

import _common

import fiber
import fiber.managers
from fiber.transport.client import ConnectionLost

from fiber_ci import netns


class Slow:
    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def ip(self):
        return _common.my_ip()


class SlowManager(fiber.managers.BaseManager):
    pass


SlowManager.register("Slow", Slow)


def call(slow, out, started):
    started.put(_common.my_ip())
    t = time.monotonic()
    try:
        slow.sleep(120)
        out.put(("returned", 0.0))
    except ConnectionLost as e:
        out.put((f"ConnectionLost: {e}", round(time.monotonic() - t, 3)))
    except BaseException as e:
        out.put((f"{type(e).__name__}: {e}", round(time.monotonic() - t, 3)))


def main():
    hosts = _common.setup()
    manager = SlowManager()
    with netns.on_host(1):
        manager.start()
    slow = manager.Slow()
    manager_ip = slow.ip()
    out, started = fiber.Queue(), fiber.Queue()
    with netns.on_host(2):
        p = fiber.Process(target=call, args=(slow, out, started))
        p.start()
    client_ip = started.get(timeout=_common.TIMEOUT)
    mine = []
    th = threading.Thread(target=lambda: call(slow, _ListQueue(mine), _ListQueue([])))
    th.start()
    time.sleep(1.0)  # both calls are running in the manager
    t = time.monotonic()
    if "--silent" in sys.argv:  # the test brings the link up again
        veth = sys.argv[sys.argv.index("--silent") + 1]
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    manager._process.kill()
    child = out.get(timeout=_common.TIMEOUT)
    th.join(_common.TIMEOUT)
    p.join(_common.TIMEOUT)
    manager.shutdown()
    _common.result(child=child, master=mine[0] if mine else "still blocked",
                   seconds=round(time.monotonic() - t, 3), manager_ip=manager_ip,
                   client_ip=client_ip, child_exit=p.exitcode,
                   host_ips=[ip for _, ip in hosts.hosts],
                   grace=fiber.config.get_config().heartbeat_timeout)


class _ListQueue:
    def __init__(self, items):
        self.items = items

    def put(self, x):
        self.items.append(x)


if __name__ == "__main__":
    main()
