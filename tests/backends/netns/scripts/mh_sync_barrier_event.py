"""A Barrier of four parties (three processes on three hosts and the master), whose
action runs once; then an Event set by the master wakes processes on every host."""

import time

import _common

import fiber

from fiber_ci import netns


def note(q):
    q.put(("action", _common.my_ip()))


def party(barrier, event, out):
    index = barrier.wait(timeout=_common.TIMEOUT)
    out.put(("index", index, _common.my_ip()))
    t = time.monotonic()
    woken = event.wait(_common.TIMEOUT)
    out.put(("woken", woken, round(time.monotonic() - t, 3)))


def main():
    hosts = _common.setup()
    actions, out = fiber.Queue(), fiber.Queue()
    barrier = fiber.Barrier(4, action=lambda: note(actions), timeout=_common.TIMEOUT)
    event = fiber.Event()
    procs = []
    for i in (1, 2, 3):
        with netns.on_host(i):
            p = fiber.Process(target=party, args=(barrier, event, out))
            p.start()
        procs.append(p)
    mine = barrier.wait()
    indices = sorted([out.get(timeout=_common.TIMEOUT) for _ in procs], key=str)
    action = actions.get(timeout=_common.TIMEOUT)
    extra_actions = actions.qsize()
    time.sleep(0.5)  # the children are waiting on the event
    t = time.monotonic()
    event.set()
    woken = [out.get(timeout=_common.TIMEOUT) for _ in procs]
    wake_seconds = round(time.monotonic() - t, 3)
    _common.join_all(procs)
    _common.result(
        indices=sorted([i for _, i, _ in indices] + [mine]),
        party_ips=sorted(ip for _, _, ip in indices), action_runs=1 + extra_actions,
        action_ip=action[1], woken=[w for _, w, _ in woken], wake_seconds=wake_seconds,
        host_ips=[ip for _, ip in hosts.hosts], exitcodes=[p.exitcode for p in procs])


if __name__ == "__main__":
    main()
