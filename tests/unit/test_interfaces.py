"""Every interface of fiber is on one page: each abstract base and ``Protocol`` defined in
``src/fiber`` is listed in ``fiber._abc`` and rendered by docs/contributing/interfaces.md,
and each of their methods says what it does (a docstring), as trio's ``trio.abc`` does.
A new interface defined elsewhere and not listed fails here."""

from __future__ import annotations

import ast
import inspect
import os
from typing import Dict, Set

import fiber._abc as interfaces

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "src", "fiber")
PAGE = os.path.join(ROOT, "docs", "contributing", "interfaces.md")


def _base_names(node: ast.ClassDef) -> Set[str]:
    out = set()
    for base in node.bases:
        if isinstance(base, ast.Subscript):
            base = base.value
        if isinstance(base, ast.Attribute):
            out.add(base.attr)
        elif isinstance(base, ast.Name):
            out.add(base.id)
    return out


def _defined() -> Dict[str, Set[str]]:
    """Every class of src/fiber but fiber.testing (the suite's own helpers): its bases."""
    classes: Dict[str, Set[str]] = {}
    for folder, _, files in os.walk(SRC):
        if os.path.relpath(folder, SRC).split(os.sep)[0] == "testing":
            continue
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.ClassDef):
                        classes[node.name] = classes.get(node.name, set()) | _base_names(node)
    return classes


def test_every_protocol_and_abstract_base_is_listed():
    defined = _defined()
    found = {name for name, bases in defined.items() if bases & {"Protocol", "ABC"}}
    assert found, "the scan found no interface at all"
    missing = sorted(found - set(interfaces.__all__))
    assert not missing, f"interfaces not listed in fiber._abc: {missing}"


def test_every_listed_class_is_an_interface_or_a_base():
    defined = _defined()
    for name in interfaces.__all__:
        bases = defined[name]
        subclasses = [other for other, b in defined.items() if name in b]
        assert bases & {"Protocol", "ABC"} or subclasses, (
            f"fiber._abc lists {name}, which is neither an interface nor a base")


def test_every_method_says_what_it_does():
    undocumented = []
    for name in interfaces.__all__:
        cls = getattr(interfaces, name)
        for attr, value in vars(cls).items():
            if attr.startswith("__") and attr != "__init__":
                continue
            fn = value.fget if isinstance(value, property) else value
            if (inspect.isfunction(fn) and fn.__qualname__.startswith(f"{cls.__qualname__}.")
                    and not (fn.__doc__ or "").strip()):  # (not a Protocol's own __init__)
                undocumented.append(f"{name}.{attr}")
    assert not undocumented, f"methods without a docstring: {undocumented}"


def test_the_page_renders_each_interface():
    with open(PAGE, encoding="utf-8") as f:
        page = f.read()
    for name in interfaces.__all__:
        cls = getattr(interfaces, name)
        assert f"::: {cls.__module__}.{cls.__qualname__}\n" in page, (
            f"{PAGE} does not render {cls.__module__}.{cls.__qualname__}")
