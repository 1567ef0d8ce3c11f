"""Reset every TCP connection of host 2 to the master (``ss -K``, as in mh_reset.py) while
a Process on host 2 waits, one thread a wait, on objects the master serves: a ``Lock``
the master holds, a ``Semaphore(0)``, an ``Event``, a ``Condition``, a ``Barrier(2)``, a
``Pipe``'s read end, a ``Value`` whose lock the master holds (an access waits for it), a
``JoinableQueue`` with an item not done (its ``join``), and a second ``Barrier(2)``
whose action the child runs (it arrives last) while the resets come. After the resets
the master releases, sets, notifies, arrives and sends. Expected: each wait returns what
it would have without the resets (the lock taken, the semaphore's one release taken
once, the event set, the notification, the barrier passed, the message received once),
none raises, and the lock's and semaphore's state afterwards is right.

Usage: ``mh_reset_waits.py RESETS`` (how many resets, 1.5 s apart). Prints RESULT.
"""

import logging
import os
import threading
import time

import _common

import fiber

from fiber_ci import netns

WAIT = 60.0  # each wait's own timeout: far past the resets
ACTION_S = 4.0  # the second barrier's action, run by the child: the resets fall in it


def slow_action():
    time.sleep(ACTION_S)


def waiter(objs, out):
    lock, sem, ev, cond, barrier, reader, value, jq, runner, bounded = objs

    def join():
        jq.join()
        return True

    def take_lock():
        got = lock.acquire(timeout=WAIT)
        if got:
            lock.release()
        return got

    def wait_cond():
        with cond:
            return cond.wait(WAIT)

    waits = {"lock": take_lock, "semaphore": lambda: sem.acquire(timeout=WAIT),
             "event": lambda: ev.wait(WAIT), "condition": wait_cond,
             "barrier": lambda: barrier.wait(WAIT), "pipe": reader.recv,
             "value": lambda: value.value, "join": join,
             "runner": lambda: runner.wait(WAIT),
             "bounded put": lambda: bounded.put("child", timeout=WAIT) is None}

    def run(name, fn):
        out.put(("ready", name))
        try:
            value = fn()
        except BaseException as e:  # noqa: BLE001 - said in the result, not raised
            value = "raised " + repr(e)
        out.put((name, value))

    threads = [threading.Thread(target=run, args=item) for item in waits.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def main():
    resets = int(os.sys.argv[1])
    hosts = _common.setup()
    logging.getLogger("fiber").setLevel(logging.INFO)
    lock, sem, ev = fiber.Lock(), fiber.Semaphore(0), fiber.Event()
    cond, barrier = fiber.Condition(), fiber.Barrier(2)
    reader, writer = fiber.Pipe(duplex=False)
    value = fiber.Value("i", 0)
    jq = fiber.JoinableQueue()
    jq.put("work")
    runner = fiber.Barrier(2, action=slow_action)  # the child arrives last: it runs it
    bounded = fiber.Queue(maxsize=1)
    bounded.put("full")  # the child's put waits for room
    runner_index = []
    first = threading.Thread(target=lambda: runner_index.append(runner.wait(WAIT)))
    first.start()
    out = fiber.Queue()
    lock.acquire()
    value.get_lock().acquire()
    value.value = 7
    with netns.on_host(2):
        child = fiber.Process(target=waiter, name="Waiter",
                              args=((lock, sem, ev, cond, barrier, reader, value, jq,
                                     runner, bounded), out))
        child.start()
    ready = set()
    while len(ready) < 10:
        kind, name = out.get(timeout=_common.TIMEOUT)
        ready.add(name)
    time.sleep(1.0)  # each call under way on the master's hub
    killed = []
    for i in range(resets):
        if i:
            time.sleep(1.5)
        killed.append(_common.reset_host(hosts, 2))
    time.sleep(1.0)
    lock.release()
    sem.release()
    ev.set()
    with cond:
        cond.notify_all()
    try:
        master_index = barrier.wait(_common.TIMEOUT)
    except Exception as e:  # noqa: BLE001 - said in the result
        master_index = "raised " + repr(e)
    writer.send("hello")
    value.get_lock().release()
    jq.get(timeout=_common.TIMEOUT)
    jq.task_done()
    bounded_got = [bounded.get(timeout=_common.TIMEOUT) for _ in range(2)]
    try:
        bounded_got.append(bounded.get(timeout=1))
    except Exception:  # noqa: BLE001 - empty: the child's item came once
        pass
    results = {}
    try:
        while len(results) < 10:
            name, value = out.get(timeout=WAIT + 10)
            results[name] = value
    except Exception as e:  # noqa: BLE001 - said in the result
        results["missing"] = repr(e)
    child.join(_common.TIMEOUT)
    first.join(_common.TIMEOUT)
    results["runner_master"] = runner_index[0] if runner_index else "raised"
    _common.result(killed=killed, results=results, master_index=master_index,
                   bounded_got=bounded_got,
                   lock_free_after=lock.acquire(timeout=10),
                   semaphore_after=sem.get_value(), child_exitcode=child.exitcode)


if __name__ == "__main__":
    main()
