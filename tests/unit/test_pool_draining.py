"""``close()`` while an ``imap`` is not read to its end (``fiber.pool._draining``): the
maintainer must end once the drain is done and the last job has ended, whatever the
drain thread does after it. A real pool on the local backend; the drain thread is made
to outlive its work by a delay wrapped around its function (the one stand-in here: on a
loaded machine the scheduler does the same, and the ssh stage of CI hung so). The test
fails on the code before its fix."""

from __future__ import annotations

import threading
import time

import fiber
from fiber.pool import _draining


def test_join_ends_when_the_drain_thread_outlives_the_last_job(monkeypatch) -> None:
    """The maintainer took a live drain thread for a drain still going, so it did not
    end when the last job ended after the drain's wake-up, and waited for ever for a
    wake-up that was never coming: ``join()`` hung."""
    real = _draining._drain

    def drain_then_linger(*args: object) -> None:
        real(*args)  # queues the rest, lets the idle workers go, wakes the maintainer
        time.sleep(3)  # ... which sees the workers' jobs end while this thread lives

    monkeypatch.setattr(_draining, "_drain", drain_then_linger)
    pool = fiber.Pool(2)
    try:
        it = pool.imap(abs, range(-200, 0))
        first = next(it)
        pool.close()
        joiner = threading.Thread(target=pool.join, daemon=True)
        joiner.start()
        joiner.join(30)
        assert not joiner.is_alive(), "join() still waits 30 s after the pool closed"
        assert sorted([first, *it]) == list(range(1, 201))
    finally:
        pool.terminate()
