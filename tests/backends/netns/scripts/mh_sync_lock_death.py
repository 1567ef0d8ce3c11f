"""Locks whose holder dies on another host are released: a Lock served by the master held
by a process on host 2 that is SIGKILLed, and an RLock served by a process on host 1 held
by a process on host 3 that is killed, then taken by a process on host 2.

``--silent VETH`` (host 2's bridge-side link): host 2 is cut off before its holder is
killed, so no end of its connections reaches the master; the backend's word that the
job ended releases the lock (the second part is left out)."""

import os
import queue
import signal
import subprocess
import sys
import time

import _common

import fiber

from fiber_ci import netns


def hold(lock, ready):
    lock.acquire()
    ready.put((os.getpid(), _common.my_ip()))
    time.sleep(120)


def serve_lock(back, control):
    lock = fiber.RLock()  # served while this reference lives
    back.put((lock, _common.my_ip()))
    control.get(timeout=90)


def take(lock, out):
    t = time.monotonic()
    got = lock.acquire(timeout=_common.TIMEOUT)
    out.put((got, round(time.monotonic() - t, 3), _common.my_ip()))
    if got:
        lock.release()


def main():
    hosts = _common.setup()
    res = {}
    lock, ready = fiber.Lock(), fiber.Queue()
    with netns.on_host(2):
        holder = fiber.Process(target=hold, args=(lock, ready))
        holder.start()
    pid, ip = ready.get(timeout=_common.TIMEOUT)
    res["held_elsewhere"] = lock.acquire(timeout=0.2) is False
    silent = "--silent" in sys.argv  # the test brings the link up again
    if silent:
        veth = sys.argv[sys.argv.index("--silent") + 1]
        subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    os.kill(holder.pid, signal.SIGKILL)
    t = time.monotonic()
    res["master_got"] = lock.acquire(timeout=_common.TIMEOUT)
    res["master_seconds"] = round(time.monotonic() - t, 3)
    holder.join(_common.TIMEOUT)
    res["holder_exit"], res["holder_ip"] = holder.exitcode, ip
    res["host_ips"] = [ip for _, ip in hosts.hosts]
    res["grace"] = fiber.config.get_config().heartbeat_timeout
    if silent:
        _common.result(**res)
        return

    back, control, out = fiber.Queue(), fiber.Queue(), fiber.Queue()
    with netns.on_host(1):
        server = fiber.Process(target=serve_lock, args=(back, control))
        server.start()
    try:
        rlock, res["server_ip"] = back.get(timeout=_common.TIMEOUT)
        with netns.on_host(3):
            holder = fiber.Process(target=hold, args=(rlock, ready))
            holder.start()
        _, res["holder3_ip"] = ready.get(timeout=_common.TIMEOUT)
        with netns.on_host(2):
            taker = fiber.Process(target=take, args=(rlock, out))
            taker.start()
        time.sleep(1.0)
        try:
            out.get(timeout=0.1)
            res["taker_waited"] = False
        except queue.Empty:
            res["taker_waited"] = True
        holder.kill()
        got, seconds, taker_ip = out.get(timeout=_common.TIMEOUT)
        res.update(taker_got=got, taker_seconds_total=seconds, taker_ip=taker_ip)
        _common.join_all([holder, taker])
    finally:
        control.put("done")
        server.join(_common.TIMEOUT)
    _common.result(**res)


if __name__ == "__main__":
    main()
