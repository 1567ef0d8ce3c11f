"""fiber's import graph: data flows down, and nothing imports in a circle.

Every module of ``src/fiber`` belongs to a *unit* (a top-level module or package of
``fiber``), and every unit to a layer. A module may import from its own unit and from
units of lower layers only; and no chain of imports may lead back to where it started,
counting every import statement (inside functions and ``TYPE_CHECKING`` blocks too) but
one kind: the per-process state classes of ``fiber._state`` name the types of what they
hold, from every layer, in ``TYPE_CHECKING`` blocks; they are a leaf at run time, and
those imports, never run, are not counted. Read from the source with :mod:`ast`: nothing
of fiber is imported or run here.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, List, Optional, Set, Tuple

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "fiber"

#: Layers, lowest first: a unit imports only from its own layer and those below.
LAYERS: List[Tuple[str, ...]] = [
    ("errors", "_version", "_exports", "_process_state", "_state", "_backoff"),  # leaves
    ("config", "transport"),                          # transport takes its settings as args
    ("_log", "_machine", "_preload", "backends"),     # the backend layer
    ("_core", "meta"),                                # the hub, served objects, parking
    ("process",),
    ("connection", "queues", "synchronize"),
    ("sharedctypes",),
    ("pool",),
    ("managers",),
    ("context",),                                     # binds the API to one backend
    ("futures", "ring", "joblib", "optuna"),          # on a context's processes
    ("experimental", "backend"),                      # the original fiber's interfaces
    ("fiber", "cli", "_top", "__main__", "testing", "dashboard", "_abc"),  # the namespace, tools
]
RANK: Dict[str, int] = {unit: i for i, units in enumerate(LAYERS) for unit in units}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES: Dict[str, pathlib.Path] = {_module_name(p): p for p in SRC.rglob("*.py")}


def _unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _type_checking_block(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and isinstance(node.test, ast.Name) and (
        node.test.id == "TYPE_CHECKING")


def _imports(module: str, source: Optional[str] = None) -> Set[str]:
    """The fiber modules ``module`` imports (a package's ``__init__`` when a name is
    taken from it; the submodule when the name is one), read from its file or ``source``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if source is None:
        source = path.read_text(encoding="utf-8")
    found: Set[str] = set()
    tree = ast.parse(source)
    if _unit(module) == "_state":  # types only (see above): not followed
        tree.body = [n for n in tree.body if not _type_checking_block(n)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "fiber")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source.split(".")[0] != "fiber":
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add(sub if sub in MODULES else source)
    return {m for m in found if m != module}


GRAPH: Dict[str, Set[str]] = {m: _imports(m) for m in MODULES}


def test_every_unit_has_a_layer():
    unknown = sorted({_unit(m) for m in MODULES} - set(RANK))
    assert not unknown, f"units without a layer (add them to LAYERS): {unknown}"


def test_imports_go_down_the_layers():
    upward = [f"{m} -> {d}" for m, deps in sorted(GRAPH.items()) for d in sorted(deps)
              if RANK.get(_unit(d), 0) > RANK.get(_unit(m), 0)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_transport_imports_nothing_of_fiber_but_leaves():
    """The transport is usable alone: of fiber it imports its errors and this process's
    state (`fiber._process_state`), both leaves."""
    outside = [f"{m} -> {d}" for m, deps in sorted(GRAPH.items()) if _unit(m) == "transport"
               for d in sorted(deps) if _unit(d) not in ("transport", "errors", "_process_state")]
    assert not outside, "\n".join(outside)


def _cycles() -> List[List[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, "modules that import each other (directly or not):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("source", [
    "def f():\n    from ..context import get_context\n",
    "if TYPE_CHECKING:\n    from .. import context\n",
    "import fiber.context\n",
])
def test_the_checker_sees_every_import(source, monkeypatch):
    """A checker that missed an import inside a function or a ``TYPE_CHECKING`` block
    (or a cycle through one) would pass without looking: it must see one planted there."""
    assert _imports("fiber.pool._pool", source) == {"fiber.context"}
    monkeypatch.setitem(GRAPH, "fiber.pool._pool", {"fiber.context"})
    assert any("fiber.pool._pool" in cycle for cycle in _cycles())
    upward = RANK[_unit("fiber.context")] > RANK[_unit("fiber.pool._pool")]
    assert upward
