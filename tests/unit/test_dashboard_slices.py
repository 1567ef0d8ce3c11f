"""The dashboard builds a large snapshot in slices, letting the hub's thread have the GIL
between them: the slices must add up to exactly what one go gives, and only a viewer's
thread (the dashboard's, never the hub's) may sleep between them, once it has computed
a while (a sleep costs it CPU)."""

from __future__ import annotations

import json
import time
from typing import Any, List

import pytest

from fiber._core import _inspect
from fiber.dashboard import _json


def _one_go(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


@pytest.mark.parametrize("length", [0, 1, _inspect.SLICE - 1, _inspect.SLICE,
                                    _inspect.SLICE + 1, 3 * _inspect.SLICE, 1024])
def test_sliced_json_is_the_json_of_one_go(length: int) -> None:
    rows = [{"name": f"PoolWorker-{i}", "task": None if i % 2 else f"map(f) (task {i})",
             "running_s": i / 7, "done": i, "odd": {i, -i}, "quote": 'a"b\u00e9'}
            for i in range(length)]
    value = {"pid": 7, "pools": [{"name": "Pool-1", "workers": rows,
                                  "stream": [[f"PoolWorker-{i}", i, i + 1, "done", 1]
                                             for i in range(length * 2)]}],
             "warnings": [], 3: 1.5}
    assert _json(value) == _one_go(value)
    assert json.loads(_json(value))["pools"][0]["workers"][:2] == \
        json.loads(_one_go(rows[:2]))


def test_only_a_viewers_thread_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: List[float] = []
    monkeypatch.setattr(_inspect.time, "sleep", slept.append)
    monkeypatch.setattr(_inspect, "BUSY_S", 0.0)  # a pause at every slice
    seen: List[int] = []

    class Owner:
        pass

    owner = Owner()

    def describe(_: Owner) -> dict:
        before = len(slept)
        _inspect.pause()
        seen.append(len(slept) - before)
        return {"name": "probe"}

    _inspect.add_source("probes", owner, describe)
    _inspect.snapshot()  # as the hub's StatusService takes it (fiber top)
    _inspect.snapshot(viewer=True)  # as the dashboard's thread takes it
    _inspect.snapshot()  # and the flag does not outlive the viewer's snapshot
    assert seen == [0, 1, 0]
    assert slept == [_inspect.PAUSE_S]
    del owner


def test_a_viewer_pauses_once_it_has_computed_a_while(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sleep costs the viewer's thread CPU (the GIL taken back from the busy hub): it
    sleeps between two slices only once it has computed `_inspect.BUSY_S` since it last
    slept, not at every slice of a page's few rows."""
    slept: List[float] = []
    monkeypatch.setattr(_inspect.time, "sleep", slept.append)
    with _inspect.viewing():
        _inspect.pause()
        _inspect.pause()
        assert slept == []  # it has barely begun
        begun = time.thread_time()
        while time.thread_time() - begun < _inspect.BUSY_S:
            pass
        _inspect.pause()
        _inspect.pause()
        assert slept == [_inspect.PAUSE_S]
        with _inspect.viewing(False):  # the hub's thread: never
            _inspect.pause()
    _inspect.pause()
    assert slept == [_inspect.PAUSE_S]


def test_a_page_sized_json_does_not_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    """The JSON of a page (100 rows of each table) takes well under `_inspect.BUSY_S`
    to encode, in slices that go on without a sleep. (Of three encodings, one: a CI
    machine's CPU, taken away by the other lanes for a moment, once made one of them
    count 0.2 ms more.)"""
    rows = [{"name": f"PoolWorker-{i}", "state": "running"} for i in range(100)]
    sleeps = []
    for _ in range(3):
        slept: List[float] = []
        monkeypatch.setattr(_inspect.time, "sleep", slept.append)
        assert json.loads(_json({"pools": [{"workers": rows}]}))["pools"][0]["workers"] == rows
        sleeps.append(slept)
    assert [] in sleeps, sleeps


def test_a_pools_long_lists_are_sliced(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pools come in a short list: their worker tables and streams, long, are
    encoded in slices all the same (a 1,024-worker pool in one ``json.dumps`` held the
    GIL for ~10 ms)."""
    slept: List[float] = []
    monkeypatch.setattr(_inspect.time, "sleep", slept.append)
    monkeypatch.setattr(_inspect, "BUSY_S", 0.0)  # a pause at every slice
    rows = [{"name": f"PoolWorker-{i}"} for i in range(3 * _inspect.SLICE)]
    value = {"pools": [{"name": "Pool-1", "workers": rows}, {"name": "Pool-2"}]}
    assert _json(value) == _one_go(value)
    assert len(slept) == 2


def test_latencies_added_then_binned_count_as_observed_one_by_one():
    """The hub only appends a task's latency (`Histogram.add`); binned later, in bulk
    (`fold`, or `take` under the lock and `binned` outside it), the histogram is the one
    `observe` would have made value by value, bounds included."""
    import random

    from fiber.pool._status import Histogram

    rng = random.Random(7)
    values = [rng.choice(Histogram.BOUNDS) for _ in range(500)] + [
        rng.uniform(0, 400) for _ in range(2000)] + [0.0, 1e9]
    one_by_one, added, taken = Histogram(), Histogram(), Histogram()
    for v in values:
        one_by_one.observe(v)
        added.add(v)
        taken.add(v)
    added.fold()
    assert added.pending == [] and added.count == len(values)
    taken.merge(Histogram.binned(taken.take()))
    taken.observe(3.0, 5)  # a chunk's items, each at the chunk's mean
    one_by_one.observe(3.0, 5)
    added.observe(3.0, 5)
    assert added.as_dict()["buckets"] == one_by_one.as_dict()["buckets"] \
        == taken.as_dict()["buckets"]
    assert added.count == taken.count == one_by_one.count == len(values) + 5
    assert abs(added.sum - one_by_one.sum) < 1e-3 and abs(taken.sum - one_by_one.sum) < 1e-3
