"""The complete programs of the documentation: the ```python blocks of README.md and of
docs/ whose first line is ``# run: BACKEND [BACKEND...]``.

A block so marked is a program a user can save and run as it is; it is run by the
conformance suite's test_doc_programs.py on each backend it names (``local`` in the local
stage, ``slurm`` in the Slurm stage...). A block without the marker is a fragment, and is not run;
tests/unit/test_docs.py checks that every block that looks like a program (it has an
``if __name__ == "__main__":``) carries the marker.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from typing import List, Set, Tuple

from . import REPO

#: The backends a ``# run:`` marker may name.
BACKENDS = ("local", "netns", "slurm", "sge", "ssh", "docker", "kubernetes")

MARKER = re.compile(r"^# run:\s*(.*?)\s*$")
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")


@dataclasses.dataclass(frozen=True)
class Block:
    """One ```python block: where it is, its code, and the backends its marker names."""

    path: str  # relative to the repository
    line: int  # of its first code line, 1-based
    code: str
    backends: Tuple[str, ...]  # () for a block without a marker

    @property
    def name(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def imports(self) -> Set[str]:
        """The top-level packages it imports (none, for a fragment that does not parse)."""
        names: Set[str] = set()
        try:
            tree = ast.parse(self.code)
        except SyntaxError:
            return names
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
        return names

    @property
    def needs_torch(self) -> bool:
        """Whether it imports torch (itself, or through stable-baselines3)."""
        return bool(self.imports & {"torch", "stable_baselines3"})


def _repo() -> str:
    if REPO is None:
        raise RuntimeError("the documentation is in fiber's source checkout, which is not here")
    return REPO


def documents() -> List[str]:
    """README.md and every Markdown page of docs/, relative to the repository."""
    paths = ["README.md"]
    for folder, _, files in os.walk(os.path.join(_repo(), "docs")):
        for name in sorted(files):
            if name.endswith(".md"):
                paths.append(os.path.relpath(os.path.join(folder, name), _repo()))
    return sorted(paths)


def python_blocks(path: str) -> List[Block]:
    """The ```python blocks of one document (indented ones too, as in a list)."""
    with open(os.path.join(_repo(), path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        start = i + 1
        i = start
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        if language == "python":
            body = [ln[len(indent):] if ln.startswith(indent) else ln for ln in lines[start:i]]
            marker = MARKER.match(body[0]) if body else None
            backends = tuple(marker.group(1).split()) if marker else ()
            blocks.append(Block(path, start + 1, "\n".join(body) + "\n", backends))
        i += 1
    return blocks


def all_blocks() -> List[Block]:
    return [b for path in documents() for b in python_blocks(path)]


def programs_for(backend: str) -> List[Block]:
    """The marked blocks that run on ``backend``."""
    return [b for b in all_blocks() if backend in b.backends]
