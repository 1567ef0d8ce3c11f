"""fiber's per-process state has one home: ``fiber._process_state.here``, declared in
``fiber._state``.

No module of the package outside ``fiber.testing`` (whose modules are the conformance
suite's test programs, with the globals a program has) keeps mutable state at module level, as
``scripts/house-counts`` counts it: a container, a lock, an event, a thread-local or a
counter bound at module level, or a ``global`` statement. And every attribute a state
class declares says, in a ``#:`` comment above it, whose it is and what it holds.
Read from the source: nothing of fiber is run.
"""

from __future__ import annotations

import ast
import pathlib
import runpy
from typing import List

ROOT = pathlib.Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "fiber"
#: The script's own rule (``mutable_state``), not a copy of it.
mutable_state = runpy.run_path(str(ROOT / "scripts" / "house-counts"))["mutable_state"]


def test_no_module_but_the_test_programs_keeps_state_of_its_own():
    stateful = [str(path.relative_to(SRC)) for path in sorted(SRC.rglob("*.py"))
                if path.relative_to(SRC).parts[0] != "testing"
                and mutable_state(ast.parse(path.read_text(encoding="utf-8")))]
    assert not stateful, ("modules keeping per-process state at module level (move it to "
                          f"fiber._state, read it through here): {stateful}")


def test_the_rule_sees_state_planted_in_a_module():
    """A rule that missed a lock, a container or a ``global`` would pass without looking."""
    for source in ("import threading\n_lock = threading.Lock()\n", "_seen: dict = {}\n",
                   "x = 0\ndef f():\n    global x\n    x = 1\n"):
        assert mutable_state(ast.parse(source)), source
    assert not mutable_state(ast.parse('__all__ = ["f"]\nLIMIT = 3\n'))


def _undocumented(path: pathlib.Path) -> List[str]:
    """The attributes ``__init__`` sets on ``self`` without a ``#:`` comment block above."""
    lines = path.read_text(encoding="utf-8").splitlines()
    missing = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not (isinstance(node, ast.FunctionDef) and node.name == "__init__"):
            continue
        for statement in node.body:
            targets = ([statement.target] if isinstance(statement, ast.AnnAssign)
                       else getattr(statement, "targets", []))
            for target in targets:
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self"):
                    continue
                above, i = [], statement.lineno - 2
                while i >= 0 and lines[i].strip().startswith("#"):
                    above.append(lines[i].strip())
                    i -= 1
                if not any(line.startswith("#:") for line in above):
                    missing.append(f"{path.name}:{statement.lineno} {target.attr}")
    return missing


def test_every_piece_of_state_says_whose_it_is():
    states = sorted((SRC / "_state").glob("*.py"))
    assert {p.stem for p in states} >= {"transport", "jobs", "api"}
    missing = [m for path in states for m in _undocumented(path)]
    assert not missing, f"state attributes without a #: comment above them: {missing}"
