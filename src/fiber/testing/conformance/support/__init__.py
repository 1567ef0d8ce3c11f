"""What the conformance tests share, importable by the tests and by every job.

A job unpickles its target by module path: a target defined here
(``fiber.testing.conformance.support.helpers.noop``) is imported by the job that runs it
from the fiber installed where the job runs, on any host and in any image that has fiber.

- :mod:`.waiting`: ``wait_until``, and ``unusable`` for a component a test needs.
- :mod:`.helpers`, :mod:`.pool_helpers`, :mod:`.manager_helpers`, ...: targets of jobs.
- :mod:`.lost_warnings`: the lost-worker warnings a test's pool gave.
- :mod:`.cli`: running the ``fiber`` command.
- :mod:`.doc_programs`, :mod:`.es_example`: the documentation's complete programs and
  ``examples/es_bipedal.py``, which are in fiber's source checkout (`REPO`), not in the
  installed package: the tests that run them are skipped without one.
"""

from __future__ import annotations

import os
from typing import Optional

#: Where this package is: ``<checkout>/src/fiber/testing/conformance/support`` in an editable
#: install.
_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_checkout(folder: str) -> bool:
    return all(os.path.exists(os.path.join(folder, part)) for part in
               ("pyproject.toml", "README.md", "docs", os.path.join("examples", "es_bipedal.py")))


def _find_checkout() -> Optional[str]:
    """fiber's source checkout: the one this package is in (an editable install, ``src/``
    layout), else the working directory if it is one (an installed wheel tested from the
    checkout, as ``scripts/test`` does on the other Pythons); None elsewhere."""
    above = _HERE
    for _ in range(5):
        above = os.path.dirname(above)
    for folder in (above, os.getcwd()):
        if _is_checkout(folder):
            return folder
    return None


#: fiber's source checkout (its README.md, docs/ and examples/), or None when the suite runs
#: from an installed fiber outside one.
REPO: Optional[str] = _find_checkout()


def in_checkout(*parts: str) -> str:
    """The path of ``parts`` in fiber's source checkout; without one (fiber installed, run
    from elsewhere), the test is skipped by hand and fails under CI=true (`unusable`):
    what it runs is not in the package."""
    if REPO is None:
        from .waiting import unusable

        unusable("fiber's source checkout",
                 f"needs {'/'.join(parts)}/ of fiber's source checkout, which the installed "
                 "package does not carry: run the suite from a checkout to include this test")
    return os.path.join(REPO, *parts)
