"""The dashboard builds a large snapshot in slices, letting the hub's thread have the GIL
between them: the slices must add up to exactly what one go gives, and only a viewer's
thread (the dashboard's, never the hub's) may sleep between them."""

from __future__ import annotations

import json
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
