"""The conformance suite's fixtures, for its tests only (see `fiber.testing.conformance`).

- ``backend_name``, ``ctx``: the backend under test (``--fiber-backend``) with its test
  engine started, and its context. A backend that cannot be set up fails the run under
  ``CI=true``; it is skipped elsewhere.
- ``no_leaks`` (autouse): fails a test that leaves child processes or non-fiber threads
  behind, or connections to servers that are gone.
- every test has a deadline (pytest-timeout; 300 s when the session sets none); on timeout
  the stacks of all threads are dumped.
- every test here must take ``ctx``: the collection stops on one that does not.
- ``mp_pool``: the reference of the pool tests, a multiprocessing pool (one a module).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.pool
import os
from typing import Iterator, List

import pytest

from .fixtures import (  # noqa: F401 - the fixtures of this directory's tests
    backend_name,
    check_backend,
    ctx,
    default_timeouts,
    mark_items,
    no_leaks,
    register_markers,
)

HERE = os.path.dirname(os.path.abspath(__file__))

#: Modules whose tests (the ``ctx`` ones aside) depend on fiber's machinery, not on the
#: interpreter's version: fiber's suites on its other supported Pythons deselect them
#: (marker one_python). Everything that touches pickling, exits, threads, signals, warnings
#: or the standard library's multiprocessing runs everywhere.
ONE_PYTHON = frozenset({"test_pool_chaos"})
#: Modules all of whose tests are of fiber's machinery only (fiber top, the lost-worker
#: warnings) or are whole programs whose parts the suite tests on every Python already (the
#: documentation's programs): one_python as well.
ONE_PYTHON_WHOLE = frozenset({"test_observe_status", "test_observe_failures", "test_doc_programs"})


@pytest.fixture(scope="module")
def mp_pool() -> Iterator[multiprocessing.pool.Pool]:
    """The reference: a multiprocessing pool (spawn, like fiber's fresh interpreters)."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        yield pool


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    suite = [item for item in items if str(item.path).startswith(HERE + os.sep)]
    if not suite:
        return
    outside = mark_items(suite, ONE_PYTHON, ONE_PYTHON_WHOLE)
    if outside:  # every backend runs the suite: a test of it must take the backend's ctx
        raise pytest.UsageError("fiber.testing.conformance holds the suite every backend "
                                "runs; these tests do not take the ctx fixture: "
                                + ", ".join(outside))
    check_backend(config)
    default_timeouts(config, suite)
