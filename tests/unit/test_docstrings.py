"""Every public name of fiber has a docstring (the API reference is generated from them).

The public surface: what ``__all__`` of ``fiber`` and of each public subpackage exports,
and every public method, property and nested class of those classes, including what they
inherit from bases defined in fiber (not from the standard library's, whose documentation
is Python's). A name without a docstring fails the test, listed by where it is defined.
Import only: it starts no process.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, List, Set

#: The modules whose ``__all__`` is fiber's public API.
PUBLIC_MODULES = [
    "fiber", "fiber.backends", "fiber.config", "fiber.connection", "fiber.context",
    "fiber.errors", "fiber.experimental", "fiber.futures", "fiber.managers", "fiber.meta",
    "fiber.pool", "fiber.process", "fiber.queues", "fiber.ring", "fiber.sharedctypes",
    "fiber.synchronize", "fiber.dashboard", "fiber.joblib", "fiber.optuna",
]


def _ours(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "fiber"


def _documented(obj: Any) -> bool:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    return bool(doc and doc.strip())


def _members_without_docstring(cls: type, seen: Set[Any]) -> List[str]:
    missing = []
    for klass in cls.__mro__:
        if not _ours(klass):
            continue
        for name, attr in vars(klass).items():
            if name.startswith("_") or (klass, name) in seen:
                continue
            seen.add((klass, name))
            if isinstance(attr, (staticmethod, classmethod)):
                attr = attr.__func__
            if isinstance(attr, property) or inspect.isfunction(attr) or inspect.isclass(attr):
                if not _documented(attr):
                    missing.append(f"{klass.__module__}.{klass.__qualname__}.{name}")
    return missing


def undocumented() -> List[str]:
    """The public names of fiber without a docstring."""
    missing: List[str] = []
    seen: Set[Any] = set()
    for modname in PUBLIC_MODULES:
        module = importlib.import_module(modname)
        if not _documented(module):
            missing.append(modname)
        for name in module.__all__:
            obj = getattr(module, name)
            if not _ours(obj) and not (inspect.ismodule(obj) and obj.__name__.startswith("fiber")):
                continue  # a name of the standard library re-exported (``fiber.reducer``)
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if not _documented(obj):
                missing.append(f"{modname}.{name}")
            if inspect.isclass(obj):
                missing += _members_without_docstring(obj, seen)
    return missing


def test_the_walk_sees_the_public_surface():
    # a walk that saw nothing, or saw past an undocumented member, would pass wrongly
    import fiber

    seen: Set[Any] = set()
    _members_without_docstring(fiber.Pool, seen)
    assert {"map", "apply_async", "close"} <= {name for _, name in seen}

    class Undocumented(fiber.Pool):  # type: ignore[misc]
        def method(self) -> None:
            pass

        @property
        def value(self) -> int:
            return 0

    Undocumented.__module__ = "fiber.pool"
    missing = _members_without_docstring(Undocumented, seen)  # Pool's are seen already
    assert missing == ["fiber.pool.test_the_walk_sees_the_public_surface.<locals>."
                       "Undocumented.method",
                       "fiber.pool.test_the_walk_sees_the_public_surface.<locals>."
                       "Undocumented.value"]


def test_every_public_name_has_a_docstring():
    missing = undocumented()
    assert not missing, f"{len(missing)} public names without a docstring:\n" + "\n".join(missing)
