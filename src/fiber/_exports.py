"""fiber's public names: the package that exports each class (`publish`), and what it does
not export, with why (`UNSUPPORTED`). The design: docs/contributing/processes.md,
"Public names"."""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

__all__ = ["publish", "UNSUPPORTED"]

UNSUPPORTED: Mapping[str, str] = MappingProxyType({
    "managers.SharedMemoryManager": (
        "its blocks are POSIX shared memory of one host, which jobs on other hosts cannot "
        "map: fiber.Array shares its memory with the processes of its creator's host "
        "(get_obj()) and is served to the others; multiprocessing.managers."
        "SharedMemoryManager itself still works for processes of one host"),
})


def publish(module: str, *classes: type) -> None:
    """Give each of ``classes`` the public module ``module`` (where it must be exported)."""
    for cls in classes:
        cls.__module__ = module
