"""The core never names a backend (issue 28): what differs between backends is a capability
a backend declares (``jobs_share_host``, ``passes_fds``, ``jobs_are_children``,
``sees_exits_at_once``) or a key it declares (``Backend.settings``). No module outside
``fiber/backends/`` holds a backend's name in its code (docstrings and comments may say
"Slurm" to explain), but for the name of the default backend; ``fiber/testing/`` holds the
netns test backend and its hosts, and names that one alone. ``fiber/testing/conformance/``
is the API suite (tests, moved from tests/api/ to be shipped): a test there may check what
one backend does differently, as tests do, and is not held to this."""

from __future__ import annotations

import ast
import pathlib
from typing import Iterator, Set, Tuple

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "fiber"
NAMES = {"local", "slurm", "docker", "kubernetes", "netns", "sge", "ssh"}
WORDS = ("slurm", "docker", "kubernetes", "gridengine", "grid engine")
#: (module, the literal): the default of ``Config.backend``.
ALLOWED = {("config/__init__.py", "local")}


def _docstrings(tree: ast.AST) -> Set[int]:
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for statement in body:
                if (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
                        and isinstance(statement.value.value, str)):
                    out.add(id(statement.value))
    return out


def _mentions(path: pathlib.Path) -> Iterator[Tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value.lower()
            if node.value in NAMES or any(w in text for w in WORDS):
                yield node.lineno, node.value
        elif isinstance(node, (ast.Name, ast.Attribute, ast.arg, ast.FunctionDef, ast.ClassDef)):
            name = (getattr(node, "id", None) or getattr(node, "attr", None)
                    or getattr(node, "arg", None) or getattr(node, "name", ""))
            if any(w in name.lower() for w in WORDS):
                yield node.lineno, name


def test_no_module_outside_the_backends_names_a_backend():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(("backends/", "testing/conformance/")):
            continue
        for line, text in _mentions(path):
            if (rel, text) in ALLOWED:
                continue
            if rel.startswith("testing/") and (text == "netns" or text.lower() == "local"):
                continue  # the netns test backend, and `ip route ... local` in its hosts
            found.append(f"{rel}:{line}: {text!r}")
    assert not found, "\n".join(found)


def test_the_check_sees_a_name_in_code():
    source = 'if backend.name == "slurm":\n    pass\n'
    tree_file = SRC.parent / "__check_probe__.py"
    try:
        tree_file.write_text(source)
        assert [t for _, t in _mentions(tree_file)] == ["slurm"]
    finally:
        tree_file.unlink()
