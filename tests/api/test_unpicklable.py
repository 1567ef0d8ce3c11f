"""An object that cannot be pickled is named: which argument, item or target, and the
path to the culprit inside it; the error keeps its type (``except TypeError`` works) and
nothing else is lost (the other tasks of the map, the queue's later items)."""

from __future__ import annotations

import threading

import pytest

from support import helpers


class Holder:
    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_a_map_item_is_named(ctx):
    with ctx.Pool(2) as pool:
        result = pool.map_async(helpers.identity, [1, {"cfg": Holder()}, 3], chunksize=1)
        with pytest.raises(TypeError) as err:
            result.get(timeout=60)
        message = str(err.value)
        assert "chunk 1 of map(identity)" in message
        assert "items[0]['cfg'].lock: a _thread.lock" in message
        assert pool.map(helpers.identity, [4, 5]) == [4, 5]  # the pool goes on


def test_an_apply_argument_is_named(ctx):
    with ctx.Pool(1) as pool:
        with pytest.raises(TypeError, match=r"an argument of apply\(identity\) cannot be "
                           r"pickled \(args\[0\]: a _thread.lock\)"):
            pool.apply(helpers.identity, (threading.Lock(),))
        with pytest.raises(TypeError, match=r"kwargs\['x'\]\.lock"):
            pool.apply(helpers.identity, (1,), {"x": Holder()})


def test_a_process_argument_is_named(ctx):
    p = ctx.Process(target=helpers.identity, args=(1, [threading.Lock()]), name="Worker-7")
    with pytest.raises(TypeError, match=r"Worker-7's arguments cannot be pickled "
                       r"\(args\[1\]\[0\]: a _thread.lock\)"):
        p.start()
    assert ctx.active_children() == []


def test_a_queue_item_is_named_and_the_queue_goes_on(ctx):
    q = ctx.Queue()
    q.put(1)
    with pytest.raises(TypeError, match=r"the item put on the queue cannot be pickled "
                       r"\(item\.lock: a _thread.lock\)"):
        q.put(Holder())
    q.put(2)
    assert [q.get(timeout=30), q.get(timeout=30)] == [1, 2]


def test_a_pipe_object_is_named(ctx):
    a, b = ctx.Pipe()
    with pytest.raises(TypeError, match=r"the object sent cannot be pickled"):
        a.send([1, threading.Lock()])
    a.send("next")
    assert b.recv() == "next"
