"""Every public name of multiprocessing is provided by fiber, or listed with a reason:
``multiprocessing.__all__``, and the names programs use of ``multiprocessing.pool``,
``multiprocessing.connection`` and ``multiprocessing.managers`` (their ``__all__``, what
the documentation names, and the proxies and errors programs import)."""

from __future__ import annotations

import importlib
import multiprocessing

import pytest

import fiber
from fiber._exports import UNSUPPORTED

#: The names of each submodule that programs use, beyond its ``__all__``.
USED = {
    "pool": ["AsyncResult", "ApplyResult", "MapResult", "IMapIterator",
             "IMapUnorderedIterator", "RemoteTraceback", "MaybeEncodingError", "TimeoutError",
             "INIT", "RUN", "CLOSE", "TERMINATE"],
    "connection": ["Connection", "BufferTooShort", "AuthenticationError",
                   "deliver_challenge", "answer_challenge", "families"],
    "managers": ["Namespace", "AutoProxy", "MakeProxyType", "BaseListProxy", "ListProxy",
                 "DictProxy", "ValueProxy", "ArrayProxy", "NamespaceProxy", "IteratorProxy",
                 "AcquirerProxy", "ConditionProxy", "EventProxy", "BarrierProxy",
                 "BasePoolProxy", "PoolProxy", "RemoteError"],
}


def _names(sub: str) -> list:
    module = importlib.import_module(f"multiprocessing.{sub}")
    return sorted(set(module.__all__) | set(USED[sub]))


def test_every_multiprocessing_name_is_provided_or_explained():
    missing = [n for n in multiprocessing.__all__
               if not hasattr(fiber, n) and n not in UNSUPPORTED]
    assert not missing, f"neither provided nor listed as unsupported: {missing}"


@pytest.mark.parametrize("sub", sorted(USED))
def test_every_name_of_a_submodule_is_provided_or_explained(sub):
    ours = importlib.import_module(f"fiber.{sub}")
    theirs = importlib.import_module(f"multiprocessing.{sub}")
    assert all(hasattr(theirs, n) for n in _names(sub))  # the list names real names
    missing = [n for n in _names(sub) if not hasattr(ours, n) and f"{sub}.{n}" not in UNSUPPORTED]
    assert not missing, f"fiber.{sub} neither provides nor explains: {missing}"


def _provided(key: str) -> bool:
    sub, _, name = key.rpartition(".")
    return hasattr(importlib.import_module(f"fiber.{sub}") if sub else fiber, name)


def test_unsupported_list_is_honest():
    provided_but_listed = [n for n in UNSUPPORTED if _provided(n)]
    assert not provided_but_listed, provided_but_listed
    assert all(reason.strip() for reason in UNSUPPORTED.values())


def test_fiber_all_is_importable():
    for name in fiber.__all__:
        assert hasattr(fiber, name), name
