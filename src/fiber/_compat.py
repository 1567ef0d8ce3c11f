"""Names of ``multiprocessing`` that fiber does not provide (yet), with why.

The public-name test (tests/unit/test_public_names.py) checks that every name of
``multiprocessing.__all__`` is either provided by ``fiber`` or listed here with its
reason, and likewise the names programs use of ``multiprocessing.pool``,
``multiprocessing.connection`` and ``multiprocessing.managers`` (keyed
``"managers.SharedMemoryManager"``) against ``fiber.pool``, ``fiber.connection`` and
``fiber.managers``. An entry is removed when the name lands.
"""

from __future__ import annotations

from typing import Dict

UNSUPPORTED: Dict[str, str] = {
    "managers.SharedMemoryManager": (
        "its blocks are POSIX shared memory of one host, which jobs on other hosts cannot "
        "map: fiber.Array shares its memory with the processes of its creator's host "
        "(get_obj()) and is served to the others; multiprocessing.managers."
        "SharedMemoryManager itself still works for processes of one host"),
}
