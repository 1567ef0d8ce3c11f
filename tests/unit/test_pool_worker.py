"""A pool worker's polling for its next task (``fiber.pool._worker.SpinPays``): it polls
while polling pays, and stops after a wait that polling would not have shortened."""

from __future__ import annotations

import time

from fiber.pool._worker import SpinPays


def test_a_worker_polls_only_while_its_waits_are_short():
    pays = SpinPays(0.5)
    assert pays.start() == 0.5  # the first wait polls
    pays.waited()  # the next task came at once (an RL step)
    assert pays.start() == 0.5
    time.sleep(1.0)  # the whole round of an evolution strategy
    pays.waited()
    assert pays.start() == 0.0  # no polling for the next one
    pays.waited()  # ...which came at once after all
    assert pays.start() == 0.5  # polls again


def test_no_polling_when_spin_us_is_zero():
    pays = SpinPays(0.0)
    for _ in range(3):
        assert pays.start() == 0.0
        pays.waited()


def test_a_wait_without_polling_may_be_longer_by_a_wake_up_and_still_count_as_short():
    """Slept, a wait lasts longer than polled by the wake-up: up to twice the polling
    time it lets the next wait poll (an ``apply`` loop whose round trip is near
    ``spin_us`` stopped polling for good after one slow wait). A polled wait that outlasts
    the polling time, or a slept one beyond twice it, stops the polling."""
    pays = SpinPays(0.5)
    pays.start()
    time.sleep(0.7)  # polled: the task came after the polling time
    pays.waited()
    assert pays.start() == 0.0
    time.sleep(0.7)  # slept: within twice the polling time
    pays.waited()
    assert pays.start() == 0.5  # polls again
    time.sleep(0.7)
    pays.waited()
    assert pays.start() == 0.0
    time.sleep(1.5)  # slept, and longer than twice the polling time: an ES round
    pays.waited()
    assert pays.start() == 0.0
