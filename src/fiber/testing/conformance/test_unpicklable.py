"""An object that cannot be pickled is named: which argument, item or target, and the
path to the culprit inside it; the error keeps its type (``except TypeError`` works) and
nothing else is lost (the other tasks of the map, the queue's later items). A
``Queue.put`` reports it on stderr and drops the item, as ``multiprocessing``'s feeder
thread does."""

from __future__ import annotations

import functools
import threading
import traceback
from typing import Callable, List

import pytest

from fiber.errors import RemoteTraceback

from .support import helpers


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


def test_a_queue_item_is_named_and_the_queue_goes_on(ctx, capsys):
    q = ctx.Queue()
    q.put(1)
    q.put(Holder())  # dropped and reported, as by multiprocessing's feeder thread
    assert ("TypeError: the item put on the queue cannot be pickled (item.lock: a "
            "_thread.lock)") in capsys.readouterr().err
    q.put(2)
    assert [q.get(timeout=30), q.get(timeout=30)] == [1, 2]
    with pytest.raises(TypeError, match=r"the item put on the queue cannot be pickled "
                       r"\(item\.lock: a _thread.lock\)"):
        ctx.SimpleQueue().put(Holder())  # pickled by put, as multiprocessing's


def test_a_pipe_object_is_named(ctx):
    a, b = ctx.Pipe()
    with pytest.raises(TypeError, match=r"the object sent cannot be pickled"):
        a.send([1, threading.Lock()])
    a.send("next")
    assert b.recv() == "next"


def _raised(call: Callable[[], object]) -> BaseException:
    try:
        call()
    except Exception as e:
        return e
    raise AssertionError(f"{call} raised nothing")


def _remote_heading(error: BaseException) -> List[str]:
    """What of ``error``'s report says it came from another process (nothing should)."""
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    heading = [line for line in text.splitlines() if "RemoteTraceback" in line]
    if isinstance(error.__cause__, RemoteTraceback):
        heading.append(f"__cause__: {error.__cause__!r}")
    return heading


def test_a_pickling_failure_in_the_caller_reads_as_a_local_error(ctx):
    """A task, target or item that cannot be pickled fails in the calling process: its
    error must not be headed by a ``RemoteTraceback``, which says another process
    raised it."""
    lock = threading.Lock()
    errors: List[BaseException] = []
    with ctx.Pool(1) as pool:
        calls = {
            "apply": lambda: pool.apply(helpers.identity, (lock,)),
            "map": lambda: pool.map(helpers.identity, [1, Holder()], 1),
            "imap": lambda: list(pool.imap(helpers.identity, [Holder()])),
            "function": lambda: pool.apply(functools.partial(helpers.identity, lock)),
            "callback": lambda: pool.apply_async(helpers.identity, (lock,),
                                                 error_callback=errors.append).get(60),
        }
        for api, call in calls.items():
            error = _raised(call)
            assert isinstance(error, TypeError), (api, error)
            assert "cannot be pickled" in str(error), (api, error)
            assert _remote_heading(error) == [], api
        assert len(errors) == 1 and _remote_heading(errors[0]) == []
    q = ctx.SimpleQueue()  # (a Queue's put reports it on stderr: see above)
    process = ctx.Process(target=helpers.identity, args=(lock,))
    for error in (_raised(lambda: q.put(Holder())), _raised(process.start)):
        assert isinstance(error, TypeError) and "cannot be pickled" in str(error), error
        assert _remote_heading(error) == []


def test_an_error_of_an_object_served_here_reads_as_a_local_error(ctx):
    """An object this process serves itself (a lock, a queue) raises its errors as its
    own, as multiprocessing's do: no remote traceback."""
    lock = ctx.Lock()
    error = _raised(lock.release)
    assert isinstance(error, ValueError), error
    assert _remote_heading(error) == []
