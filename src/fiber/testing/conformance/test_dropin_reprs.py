"""fiber's objects print as multiprocessing's do: the same shape, with fiber's
module names, checked against the standard library's own reprs, made here. ``Event`` and
``Barrier`` print as Python 3.11's do on every version (3.9 and 3.10 print them as plain
objects)."""

from __future__ import annotations

import multiprocessing
import re
import sys
from types import MappingProxyType

import pytest

import fiber

from .support import dropin_helpers as dh

pytestmark = pytest.mark.timeout(120)


def shape(text: str) -> str:
    """A repr with its addresses, pids and module paths blanked out."""
    text = re.sub(r"0x[0-9a-f]+", "0x?", text)
    text = re.sub(r"(pid|parent)=\d+", r"\1=?", text)
    return re.sub(r"\b(multiprocessing|fiber)(\.[a-z_]+)*\.(?=[A-Za-z_]+[ >])", "MOD.", text)


@pytest.fixture(scope="module")
def stdlib():
    return multiprocessing.get_context("spawn")


PRIMITIVES = ("Lock", "RLock", "Semaphore", "BoundedSemaphore", "Condition", "Event",
              "Queue", "SimpleQueue", "JoinableQueue")
#: What Python 3.11 and later print, where 3.9 and 3.10 print a plain object.
SINCE_311 = MappingProxyType({"Event": "<Event at 0x? unset>",
                              "Barrier": "<MOD.Barrier at 0x?: waiters=0/2>"})
OLD = sys.version_info < (3, 11)


@pytest.mark.parametrize("name", PRIMITIVES)
def test_fresh_primitives_and_queues(ctx, stdlib, name):
    ours, theirs = repr(getattr(ctx, name)()), repr(getattr(stdlib, name)())
    expected = SINCE_311[name] if OLD and name in SINCE_311 else shape(theirs)
    assert shape(ours) == expected, (ours, theirs)


def test_held_locks_set_events_barriers_and_pipes(ctx, stdlib):
    pairs = []
    for make in (lambda c: c.Lock(), lambda c: c.RLock()):
        ours, theirs = make(ctx), make(stdlib)
        ours.acquire()
        theirs.acquire()
        if isinstance(ours, fiber.RLock):
            ours.acquire()
            theirs.acquire()
        pairs.append((repr(ours), repr(theirs)))
    for c in (ctx, stdlib):
        e = c.Event()
        e.set()
        pairs.append(repr(e))
    barrier = repr(ctx.Barrier(2))
    assert shape(barrier) == (SINCE_311["Barrier"] if OLD else shape(repr(stdlib.Barrier(2))))
    pairs.append((repr(ctx.Pipe()[0]), repr(stdlib.Pipe()[0])))
    pairs.append((repr(ctx.Value("i", 5)), repr(stdlib.Value("i", 5))))
    pairs.append((repr(ctx.RawValue("d", 1.5)), repr(stdlib.RawValue("d", 1.5))))
    for ours, theirs in [p for p in pairs if isinstance(p, tuple)]:
        assert shape(ours) == shape(theirs), (ours, theirs)
    events = [p for p in pairs if isinstance(p, str)]
    assert shape(events[0]) == "<Event at 0x? set>"
    assert OLD or shape(events[1]) == shape(events[0])
    assert repr(ctx.Lock()) == "<Lock(owner=None)>"


def test_a_lock_held_by_another_process(ctx):
    lock, q, back = ctx.Lock(), ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=dh.acquire_and_wait, args=(lock, q, back))
    p.start()
    assert q.get(timeout=60) == "acquired"
    assert repr(lock) == "<Lock(owner=SomeOtherProcess)>"
    lock.release()  # a Lock may be released by any process, as multiprocessing's
    back.put("done")
    p.join(60)
    assert repr(lock) == "<Lock(owner=None)>"


def test_arrays_pools_processes_and_managers(ctx, stdlib):
    pairs = [(repr(ctx.Array("i", 3)), repr(stdlib.Array("i", 3)))]
    with ctx.Pool(1) as ours, stdlib.Pool(1) as theirs:
        pairs.append((repr(ours), repr(theirs)))
    for c in (ctx, stdlib):  # <SpawnProcess name='SpawnProcess-1' parent=4200 initial>
        p = c.Process(target=dh.triple, args=(1,))
        assert re.fullmatch(r"<\w+ name='\w+-[\d:]+' parent=\d+ initial>", repr(p)), repr(p)
        p.start()
        p.join(60)
        # fiber's adds the job and its host after the parent: job=4200-1 host=node2
        assert re.fullmatch(r"<\w+ name='\w+-[\d:]+' pid=\d+ parent=\d+ "
                            r"(job=\S+ host=\S+ )?stopped exitcode=0>", repr(p)), repr(p)
    with ctx.Manager() as ours, stdlib.Manager() as theirs:
        pairs.append((repr(ours), repr(theirs)))
        for make in (lambda m: m.Lock(), lambda m: m.list(), lambda m: m.Pool(1)):
            pairs.append((repr(make(ours)), repr(make(theirs))))
    for ours_text, theirs_text in pairs:
        assert shape(ours_text) == shape(theirs_text), (ours_text, theirs_text)
