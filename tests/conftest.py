"""Fixtures shared by the repository's tests (the API suite, which every backend runs, is
the package's: ``pytest --pyargs fiber.testing.conformance``, with its own conftest).

- ``ctx``, ``backend_name``: the fiber context of the backend under test, as in the
  conformance suite (``fiber.testing.conformance.fixtures``): ``--fiber-backend local``
  (default) or another; a backend that a module registers, such as the netns test backend
  (processes in network-namespace "hosts", fiber_ci.netns), is loaded with ``-p``:
  ``pytest -p fiber_ci.netns --fiber-backend netns``, whose test engine starts the
  hosts. A backend that cannot be set up fails the run under ``CI=true``; it is never
  skipped there.
- ``no_leaks`` (autouse): fails a test that leaves child processes or non-fiber threads
  behind, or connections to servers that are gone.
- every test has a deadline (pytest-timeout); on timeout faulthandler dumps all threads.
"""

from __future__ import annotations

import os
from typing import List

import pytest

from fiber.testing.conformance.fixtures import (  # noqa: F401 - the fixtures of tests/
    backend_name,
    ctx,
    mark_items,
    no_leaks,
    register_markers,
)

#: Test modules whose tests (the ``ctx`` ones aside) depend on fiber's machinery, not on
#: the interpreter's version: the suites on the other supported Pythons deselect them
#: (marker one_python; the conformance suite's conftest lists its own).
ONE_PYTHON = {"test_multihost", "test_multihost_sync", "test_transport", "test_cli",
              "test_docs", "test_pool_local", "test_pipe_local", "test_typed_api"}
#: Modules all of whose tests, ``ctx`` ones too, are of fiber's machinery only (fiber top,
#: ps/logs/stop, GPUs handed out on local, the lost-worker warnings): one_python as well.
ONE_PYTHON_WHOLE = {"test_observe_status_local", "test_observe_local", "test_observe_gpus",
                    "test_observe_failures_local", "test_ps_local", "test_lossy", "test_shaper",
                    "test_dashboard",
                    # the drop-in suites: CPython's own (its floor is measured on 3.11) and
                    # the original fiber's (its API, not the Python), 2 minutes each
                    "test_cpython_suite", "test_original_suite"}

TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    mark_items([item for item in items if str(item.path).startswith(TESTS + os.sep)],
               ONE_PYTHON, ONE_PYTHON_WHOLE)
