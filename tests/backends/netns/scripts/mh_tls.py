"""Issue 48: what crosses the hosts' bridge. A pool's tasks and results, a queue's items
and a manager's calls between the master and jobs on other hosts each carry a marker;
the test captures the bridge's frames meanwhile and looks for the markers. Prints how
many of the master's connections from other hosts are TLS."""

import _common

import fiber
from fiber.managers import BaseManager

ARG = b"ARGMARK-7f3a9c"
RESULT = b"RESMARK-51d2e0"
ITEM = b"ITEMMARK-c44b1e"


def work(x):
    return x.replace(ARG, RESULT)


def produce(q):
    for i in range(20):
        q.put(ITEM + str(i).encode())


class Box:
    def __init__(self):
        self.kept = []

    def keep(self, value):
        self.kept.append(value)
        return value.replace(ARG, RESULT)


class BoxManager(BaseManager):
    pass


BoxManager.register("Box", Box)


def main():
    hosts = _common.setup()
    out = {}
    with fiber.Pool(4) as pool:
        got = pool.map(work, [ARG + str(i).encode() for i in range(40)], chunksize=1)
        out["pool_ok"] = got == [RESULT + str(i).encode() for i in range(40)]
        core = pool._core
        with core.hub.lock:
            conns = [c for c in core.hub._conns.values() if c.source
                     and not c.source.startswith("127.")]
            out["remote_conns"] = len(conns)
            out["remote_tls"] = sum(1 for c in conns if c.tls)
    q = fiber.Queue()
    p = fiber.Process(target=produce, args=(q,))
    p.start()
    items = [q.get(timeout=_common.TIMEOUT) for _ in range(20)]
    p.join(_common.TIMEOUT)
    out["queue_ok"] = sorted(items) == sorted(ITEM + str(i).encode() for i in range(20))
    with BoxManager() as manager:
        box = manager.Box()
        out["manager_ok"] = box.keep(ARG + b"-m") == RESULT + b"-m"
    out["hosts"] = len(hosts.hosts)
    _common.result(**out)


if __name__ == "__main__":
    main()
