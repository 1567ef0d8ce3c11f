"""What the tests share, importable as ``support`` by the tests and by every job.

pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in ``pyproject.toml``), and a job
gets its master's ``sys.path``: a target defined here (``support.helpers.noop``) is
imported by the jobs that run it, on any backend whose jobs see this directory.

- :mod:`.waiting`: ``wait_until``, and ``unusable`` for a component a test needs.
- :mod:`.helpers`, :mod:`.pool_helpers`, :mod:`.manager_helpers`: targets of jobs.
- :mod:`.lost_warnings`: the lost-worker warnings a test's pool gave.
- :mod:`.cli_helpers`: running the ``fiber`` command (and :file:`main_pool.py`, the
  program it runs).
- :mod:`.futures_helpers`, :mod:`.stdlib_executor_helpers`: executors' targets, and
  scripts of their own (``python tests/support/futures_helpers.py``).
- :mod:`.doc_programs`: the complete programs of the documentation (``# run:`` blocks).
"""

import os

#: The tests' directory (the one ``support`` is in): ``PYTHONPATH`` of a subprocess that
#: imports ``support``.
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The repository (its scripts/, deploy/, examples/).
REPO = os.path.dirname(TESTS)


def subprocess_env(**extra: str) -> dict:
    """This process's environment for a Python subprocess that imports ``support``: the
    tests' directory first on its ``PYTHONPATH``, whatever else was there kept (the fiber
    under test may come from it), and ``extra`` set."""
    path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}
