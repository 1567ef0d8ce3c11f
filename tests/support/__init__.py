"""What the repository's tests share, importable as ``support`` by the tests and by every job.

pytest puts ``tests/`` on ``sys.path`` (``pythonpath`` in ``pyproject.toml``), and a job
gets its master's ``sys.path``: a target defined here is imported by the jobs that run it,
on any backend whose jobs see this directory. What the API suite and its jobs share is the
package's, importable wherever fiber is installed: ``fiber.testing.conformance.support``
(``wait_until``, the targets of jobs); the tests here import it from there too.

- :mod:`.cli_helpers`: running the ``fiber`` command, and :file:`main_pool.py`, the
  program ``fiber run`` runs in the CLI tests.
- :mod:`.futures_helpers`: executors' targets, and a script of its own
  (``python tests/support/futures_helpers.py``).
- :mod:`.hosts`: network-namespace hosts for a test.
- :mod:`.relayed_backend`: the local backend with its jobs' output relayed.
- :mod:`.tcp_proxy`: a TCP relay that counts bytes and cuts connections (the Kubernetes
  API server's, in tests/backends/kubernetes and benchmarks/k8s_status_bytes.py).
"""

import os
import threading

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


def joins_within(pool: object, seconds: float) -> bool:
    """Whether ``pool.join()`` returns within ``seconds`` (on a thread: a hung join must
    fail the test, not hang it)."""
    done = threading.Thread(target=pool.join, daemon=True)  # type: ignore[attr-defined]
    done.start()
    done.join(seconds)
    return not done.is_alive()
