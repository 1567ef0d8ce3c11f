"""Pipes across hosts: master <-> host 2, host 1 <-> host 3, and EOFError once the process
holding the other end is killed on its host."""

import os
import signal
import time

import _common

import fiber

from fiber_ci import netns

BIG = bytes(range(256)) * 4096  # 1 MiB


def echo(conn):
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        conn.send((_common.my_ip(), msg))


def ping(conn, n):
    for i in range(n):
        conn.send(("ping", i))
        assert conn.poll(_common.TIMEOUT), "no pong"
        assert conn.recv() == ("pong", i)
    conn.send("done")


def pong(conn):
    while True:
        assert conn.poll(_common.TIMEOUT), "no ping"
        msg = conn.recv()
        if msg == "done":
            return
        conn.send(("pong", msg[1]))


def send_then_sleep(conn):
    conn.send(("hello from", _common.my_ip()))
    time.sleep(120)


def main():
    hosts = _common.setup()
    out = {}

    # master <-> h2
    a, b = fiber.Pipe()
    with netns.on_host(2):
        p = fiber.Process(target=echo, args=(b,))
        p.start()
    b.close()
    replies = []
    for msg in ("hello", 42, BIG):
        a.send(msg)
        if not a.poll(_common.TIMEOUT):
            raise SystemExit("no echo")
        replies.append(a.recv())
    out["echo_ips"] = sorted({ip for ip, _ in replies})
    out["echo_ok"] = [m for _, m in replies] == ["hello", 42, BIG]
    a.close()  # the echo sees EOF and exits
    p.join(_common.TIMEOUT)
    out["echo_exit"] = p.exitcode

    # h1 <-> h3, through a pipe the master created
    a, b = fiber.Pipe()
    with netns.on_host(1):
        p1 = fiber.Process(target=ping, args=(a, 50))
        p1.start()
    with netns.on_host(3):
        p3 = fiber.Process(target=pong, args=(b,))
        p3.start()
    a.close()
    b.close()
    _common.join_all([p1, p3])
    out["pingpong_exits"] = [p1.exitcode, p3.exitcode]

    # EOFError when the holder of the other end is killed on its host
    a, b = fiber.Pipe()
    with netns.on_host(3):
        p = fiber.Process(target=send_then_sleep, args=(b,))
        p.start()
    b.close()
    if not a.poll(_common.TIMEOUT):
        raise SystemExit("no hello")
    out["hello"] = a.recv()
    t0 = time.monotonic()
    os.kill(p.pid, signal.SIGKILL)
    p.join(_common.TIMEOUT)
    out["killed_exit"] = p.exitcode
    out["poll_after_kill"] = a.poll(_common.TIMEOUT)  # True: EOF is "ready" as with OS pipes
    try:
        a.recv()
        out["recv_after_kill"] = "no error"
    except EOFError:
        out["recv_after_kill"] = "EOFError"
    except Exception as e:
        out["recv_after_kill"] = f"{type(e).__name__}: {e}"
    out["eof_seconds"] = round(time.monotonic() - t0, 3)
    out["host_ips"] = [ip for _, ip in hosts.hosts]
    _common.result(**out)


if __name__ == "__main__":
    main()
