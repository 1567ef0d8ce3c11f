"""What a program registers for ``fiber top`` (fiber._core._inspect): a source lives as
long as its owner, and registering one puts no weak-reference callback on the owner. Such
a callback runs wherever the garbage collector does, also inside the module's own lock
when the collection starts there: a Python 3.10 suite hung so, in ``Pool()``."""

from __future__ import annotations

import gc
import weakref

from fiber._core import _inspect


class Owner:
    pass


def _pools() -> list:
    return _inspect.snapshot()["pools"]


def test_registering_a_source_puts_no_callback_on_its_owner():
    owner = Owner()
    _inspect.add_source("pools", owner, lambda o: {"tag": "callback-check"})
    refs = weakref.getweakrefs(owner)
    assert refs, "the source holds its owner by a weak reference"
    assert all(r.__callback__ is None for r in refs)


def test_a_source_is_shown_while_its_owner_lives_and_dropped_after():
    owner = Owner()
    owner.cycle = owner  # freed only by the garbage collector
    _inspect.add_source("pools", owner, lambda o: {"tag": "lifetime-check"})
    assert {"tag": "lifetime-check"} in _pools()
    del owner
    gc.collect()
    assert {"tag": "lifetime-check"} not in _pools()
    survivor = Owner()
    _inspect.add_source("pools", survivor, lambda o: {"tag": "survivor"})
    assert {"tag": "survivor"} in _pools()
