"""The configuration reference, generated from ``fiber.config.Config`` and from the
settings each backend declares (``Backend.settings``).

Every key's type, default, environment variable and meaning (the ``#:`` comment above
its field): the core's keys, then a table per backend (its keys are ``<backend>_<key>``,
``FIBER_<BACKEND>_<KEY>``, or ``<key>`` in a ``[fiber.<backend>]`` section).
``python docs/config_reference.py`` prints the Markdown tables;
``--write FILE...`` replaces the text between the markers ``<!-- config-reference -->``
and ``<!-- /config-reference -->`` in each file; ``--check FILE...`` exits 1 when a file
disagrees with the definition (the test suite runs it for docs/configuration.md).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import sys
import textwrap
from typing import Dict, List, Tuple

from fiber import config
from fiber.config import _registry

START, END = "<!-- config-reference -->", "<!-- /config-reference -->"


def field_docs(cls: type = config.Config) -> Dict[str, str]:
    """Each field's ``#:`` comment, joined into one paragraph (fields only: an
    ``InitVar``, such as ``Config(conf_file=...)``, is an argument, not a key)."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    docs: Dict[str, str] = {}
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    for node in ast.parse(textwrap.dedent(source)).body[0].body:  # type: ignore[attr-defined]
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id in fields):
            comment: List[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                comment.insert(0, lines[i].strip()[2:].strip())
                i -= 1
            docs[node.target.id] = " ".join(comment).replace("``", "`")
    return docs


def _default(field: dataclasses.Field) -> str:
    value = field.default
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if value == "":
        return "(empty)"
    return f"`{value}`"


def _table(cls: type, prefix: str = "", skip: Tuple[str, ...] = ()) -> List[str]:
    docs = field_docs(cls)
    hints = config.field_types(cls)  # not get_type_hints: Config's InitVar (3.9)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        if field.name in skip:
            continue
        key = prefix + field.name
        meaning = docs.get(field.name, "").replace("|", "\\|")
        rows.append(f"| `{key}` (`FIBER_{key.upper()}`) | {hints[field.name].__name__} | "
                    f"{_default(field)} | {meaning} |")
    return rows


def backend_settings() -> List[Tuple[str, type]]:
    """``(backend, settings class)`` of every backend that declares settings."""
    out = []
    for name in _registry.known():
        cls = _registry.settings_class(name)
        if cls is not None:
            out.append((name, cls))
    return out


def table() -> str:
    rows = _table(config.Config, skip=("backends",))
    for name, cls in backend_settings():
        rows += ["", f"Backend `{name}`: each key also as `<key>` in a `[fiber.{name}]` "
                     "section of `.fiberconfig`.", "", *_table(cls, _registry.key_prefix(name))]
    return "\n".join(rows)


def _replaced(text: str, path: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"{path}: no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{table()}\n{END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", nargs="+", metavar="FILE")
    group.add_argument("--check", nargs="+", metavar="FILE")
    args = parser.parse_args()
    if not (args.write or args.check):
        print(table())
        return 0
    stale = []
    for path in args.write or args.check:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        new = _replaced(text, path)
        if new != text:
            if args.write:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(new)
            else:
                stale.append(path)
    for path in stale:
        print(f"{path}: the configuration reference differs from fiber.config.Config; "
              "run python docs/config_reference.py --write " + path, file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
