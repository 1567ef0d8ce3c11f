"""A process forked inside a fiber job (a pool's job forking its workers, a user's
``os.fork``) talks to the master on connections of its own: the parent's, inherited,
are closed in the child (see ``fiber.transport.channels._forget_in_child``)."""

from __future__ import annotations

import collections
import os
import warnings

import fiber

N = 300


def _both_use_the_master(lock, queue, n: int) -> None:
    with warnings.catch_warnings():  # a job has threads: forking it is the point here
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    who = "child" if pid == 0 else "parent"
    code = 1
    try:
        for i in range(n):
            with lock:  # a request answered on the connection that asked
                queue.put((who, i))
        code = 0
    finally:
        if pid == 0:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_process_forked_in_a_job_has_connections_of_its_own():
    lock, queue = fiber.Lock(), fiber.Queue()
    # the job talks to the master before it forks: its connections exist when it does
    assert lock.acquire(timeout=5)
    lock.release()
    proc = fiber.Process(target=_both_use_the_master, args=(lock, queue, N))
    proc.start()
    got = [queue.get(timeout=60) for _ in range(2 * N)]
    proc.join(60)
    assert proc.exitcode == 0
    assert collections.Counter(who for who, _ in got) == {"parent": N, "child": N}
    for who in ("parent", "child"):
        assert [i for w, i in got if w == who] == list(range(N))  # each in its order
