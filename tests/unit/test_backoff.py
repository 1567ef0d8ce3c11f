"""The waits of fiber's polling and retrying loops (``fiber._backoff``): they grow while
nothing changes, stop growing at their ceiling, and start short again after progress."""

from __future__ import annotations

from fiber._backoff import Backoff, polling, retrying


def test_polling_grows_by_half_to_its_ceiling_and_resets():
    b = polling()
    waits = [b.next() for _ in range(12)]
    assert [round(w, 4) for w in waits[:3]] == [0.05, 0.075, 0.1125]
    assert all(a <= b for a, b in zip(waits, waits[1:]))
    assert waits[-1] == 2.0 and max(waits) == 2.0
    b.reset()
    assert b.next() == 0.05


def test_retrying_doubles_from_half_a_second_to_half_a_minute():
    b = retrying()
    waits = [b.next() for _ in range(9)]
    assert waits == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]


def test_bounds_are_the_callers():
    b = polling(0.2, 1.0)
    assert [round(b.next(), 3) for _ in range(6)] == [0.2, 0.3, 0.45, 0.675, 1.0, 1.0]
    assert Backoff(1.0, 1.0, 3.0).next() == 1.0
