"""A griffe extension for the API reference: the docstrings of attributes that fiber
documents the way Sphinx reads them, which griffe alone does not.

- A ``#:`` comment above an attribute is its docstring (``Backend.jobs_share_host``,
  ``JobSpec.capture_output``, the fields of ``fiber.config.Config``, which
  docs/config_reference.py reads too);
- a module-level ``X.__doc__ = "..."`` is the docstring of ``X``: the proxy types that
  ``MakeProxyType`` makes in ``fiber.managers`` (``DictProxy``, ``ArrayProxy``...).

griffe itself reads only a string right below the assignment. mkdocs.yml loads this file
in mkdocstrings' ``extensions``.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Tuple

from griffe import Attribute, Docstring, Extension


def comment_above(lines: List[str], lineno: int) -> str:
    """The ``#:`` lines right above line ``lineno`` (1-based), joined; "" if none."""
    comment: List[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        comment.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return "\n".join(comment)


def doc_assignments(code: str) -> Dict[str, Tuple[str, int]]:
    """``{"X": (text, lineno)}`` for each module-level ``X.__doc__ = "text"``."""
    found = {}
    for node in ast.parse(code).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Attribute)
                and node.targets[0].attr == "__doc__"
                and isinstance(node.targets[0].value, ast.Name)
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            found[node.targets[0].value.id] = (node.value.value, node.lineno)
    return found


class AttributeDocstrings(Extension):
    """Gives an attribute without a docstring its ``#:`` comment or ``X.__doc__``."""

    def __init__(self) -> None:
        super().__init__()
        self._assigned: Dict[str, Dict[str, Tuple[str, int]]] = {}  # by module path

    def on_attribute_instance(self, *, node: Any, attr: Attribute, agent: Any,
                              **kwargs: Any) -> None:
        code = getattr(agent, "code", None)
        if attr.docstring is not None or not code or not isinstance(node, ast.AST):
            return
        lineno = getattr(node, "lineno", 0) or 0
        text = comment_above(code.splitlines(), lineno)
        if not text and attr.parent is not None and attr.parent.is_module:
            module = attr.parent.path
            if module not in self._assigned:
                self._assigned[module] = doc_assignments(code)
            assigned = self._assigned[module]
            text = assigned.get(attr.name, ("", lineno))[0]
        if text:
            attr.docstring = Docstring(text, lineno=lineno, parent=attr)
