"""A lock's holder on host 2 counted gone while it lives, then back: told, not obeyed.

A ``Process`` on host 2 takes a ``Lock`` the master serves and holds it for a while.
Host 2 is cut off (its veth down) and the master's connections to it are aborted (``ss
-K`` in the root namespace: its hub reads a reset); the holder cannot connect again
within the hub's wait for a reset process (``REANCHOR_WAIT_S``), so the hub counts it
gone and frees its lock, which the master takes. Host 2 is then reconnected: the
holder's process lives and comes back. Its ``release`` must raise
``fiber.errors.LockLostError`` and leave the lock the master's (before: it released the
master's lock, and the master's own release then raised ``ValueError``). It held a
second lock the same way, which it asks to take again: that ``acquire`` raises
``LockLostError`` too, after which the holder's process must not count that lock its own
any more (its repr names the master's as the owner: before, it named the holder's, whose
table of held locks ``acquire`` left as it was).

``--veth VETH`` (host 2's bridge-side link): brought down here, up again by the script
(and by the test, whatever happens). Prints RESULT.
"""

import subprocess
import sys
import time

import _common

import fiber
from fiber.transport.receipts import REANCHOR_WAIT_S

from fiber_ci import netns

CUT_S = REANCHOR_WAIT_S + 3  # past the hub's wait for a reset process to connect again
HOLD_S = 40.0  # the holder's critical section: the cut, and its coming back, fall in it


def hold(lock, again, out):
    lock.acquire()
    again.acquire()
    out.put(("held", _common.my_ip()))
    time.sleep(HOLD_S)
    try:
        lock.release()
        out.put(("released", ""))
    except Exception as e:  # what the test wants to see
        out.put((type(e).__name__, str(e)))
    try:
        again.acquire(timeout=5)
        out.put(("acquired", repr(again)))
    except Exception as e:
        out.put((type(e).__name__, repr(again)))


def main():
    hosts = _common.setup()
    veth = sys.argv[sys.argv.index("--veth") + 1]
    lock, again, out = fiber.Lock(), fiber.Lock(), fiber.Queue()
    with netns.on_host(2):
        holder = fiber.Process(target=hold, args=(lock, again, out))
        holder.start()
    what, ip = out.get(timeout=_common.TIMEOUT)
    res = {"holder": what, "holder_ip": ip, "host_ips": [h for _, h in hosts.hosts]}
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    aborted = subprocess.run(["ss", "-K", "dst", ip], capture_output=True, text=True,
                             timeout=30)
    res["aborted"] = aborted.stdout.count("ESTAB")
    t = time.monotonic()
    res["master_got"] = lock.acquire(timeout=_common.TIMEOUT)
    res["master_seconds"] = round(time.monotonic() - t, 3)
    res["master_got_again"] = again.acquire(timeout=_common.TIMEOUT)
    time.sleep(max(0.0, CUT_S - (time.monotonic() - t)))
    subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    res["told"] = out.get(timeout=HOLD_S + _common.TIMEOUT)
    res["told_again"] = out.get(timeout=_common.TIMEOUT)
    try:
        lock.release()  # the master's own: it must still hold the lock
        res["master_released"] = "ok"
    except Exception as e:
        res["master_released"] = f"{type(e).__name__}: {e}"
    again.release()
    holder.join(_common.TIMEOUT)
    res["holder_exit"] = holder.exitcode
    _common.result(**res)


if __name__ == "__main__":
    main()
