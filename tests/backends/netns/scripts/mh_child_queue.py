"""A Queue created inside a child on host 1 (served by that child's hub) and used by
children on hosts 2 and 3 and by the master: traffic between hosts, not via the master.

With ``--listen-host`` the master sets ``fiber.init(listen_host=<bridge address>)``."""

import queue
import time

import _common

import fiber

from fiber_ci import netns

N = 200


def serve(back, control):
    q = fiber.Queue()
    back.put((q, _common.my_ip()))
    control.get(timeout=90)  # keep serving q until the master is done


def produce(q, n):
    for i in range(n):
        q.put(("h2", i))


def consume(q, n, out):
    out.put((_common.my_ip(), sorted(q.get(timeout=_common.TIMEOUT)[1] for _ in range(n))))


def main():
    hosts = _common.setup()
    back, control, out = fiber.Queue(), fiber.Queue(), fiber.Queue()
    with netns.on_host(1):
        server = fiber.Process(target=serve, args=(back, control))
        server.start()
    deadline = time.monotonic() + _common.TIMEOUT
    while True:  # until the queue arrives, or its server died or took too long
        try:
            qa, server_ip = back.get(timeout=0.5)
            break
        except queue.Empty:
            if not server.is_alive() or time.monotonic() > deadline:
                server.kill()
                server.join(_common.TIMEOUT)
                _common.result(error="the child on host 1 sent no queue",
                               server_exit=server.exitcode)
                return
    with netns.on_host(2):
        prod = fiber.Process(target=produce, args=(qa, N))
        prod.start()
    with netns.on_host(3):
        cons = fiber.Process(target=consume, args=(qa, N, out))
        cons.start()
    consumer_ip, got = out.get(timeout=60)
    _common.join_all([prod, cons])
    qa.put("from master")
    from_master = qa.get(timeout=_common.TIMEOUT)
    control.put("done")
    server.join(_common.TIMEOUT)
    _common.result(
        queue_address=qa._address, server_ip=server_ip, consumer_ip=consumer_ip,
        received_ok=got == list(range(N)), from_master=from_master,
        exitcodes=[server.exitcode, prod.exitcode, cons.exitcode],
        host_ips=[ip for _, ip in hosts.hosts])


if __name__ == "__main__":
    main()
