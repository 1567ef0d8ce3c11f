"""fiber's public names: the package that exports each class, and what it does not export.

A class defined in a private module (``fiber.pool._pool``) and exported by its package
(``fiber.pool``) is given the package as ``__module__`` (`publish`), so that its repr,
its pickles (classes pickle by reference) and its documentation show the public name,
which stays when the private modules change. Called at the end of each package's
``__init__``.

`UNSUPPORTED` lists the names of ``multiprocessing`` that fiber does not provide (yet),
with why. The public-name test (tests/unit/test_public_names.py) checks that every name of
``multiprocessing.__all__`` is either provided by ``fiber`` or listed there with its
reason, and likewise the names programs use of ``multiprocessing.pool``,
``multiprocessing.connection`` and ``multiprocessing.managers`` (keyed
``"managers.SharedMemoryManager"``) against ``fiber.pool``, ``fiber.connection`` and
``fiber.managers``. An entry is removed when the name lands.
"""

from __future__ import annotations

from typing import Dict

__all__ = ["publish", "UNSUPPORTED"]

UNSUPPORTED: Dict[str, str] = {
    "managers.SharedMemoryManager": (
        "its blocks are POSIX shared memory of one host, which jobs on other hosts cannot "
        "map: fiber.Array shares its memory with the processes of its creator's host "
        "(get_obj()) and is served to the others; multiprocessing.managers."
        "SharedMemoryManager itself still works for processes of one host"),
}


def publish(module: str, *classes: type) -> None:
    """Give each of ``classes`` the public module ``module`` (where it must be exported)."""
    for cls in classes:
        cls.__module__ = module
