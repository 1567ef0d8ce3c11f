"""The one pytest plugin fiber declares (entry point ``pytest11``, named ``fiber``): the
option ``--fiber-backend NAME``, the backend the conformance suite runs on.

Only the option, because pytest must know it before it collects, and ``pytest --pyargs
fiber.testing.conformance`` loads the suite's ``conftest.py`` only when it collects the
suite. Its fixtures, markers and leak check are in that conftest, so they apply to the
suite's tests alone: a test session that does not collect the suite gets nothing from
fiber but this option (``-p no:fiber`` drops even that; with
``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set, ``-p fiber.testing.conformance.plugin`` loads it).
"""

from __future__ import annotations

import os

import pytest

#: The backend under test when ``--fiber-backend`` is not given (else ``local``).
BACKEND_ENV = "FIBER_TEST_BACKEND"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fiber", "fiber's conformance suite (fiber.testing.conformance)")
    group.addoption("--fiber-backend", dest="fiber_backend", metavar="NAME",
                    default=os.environ.get(BACKEND_ENV, "local"),
                    help=f"the fiber backend the tests that take the ctx fixture run on "
                         f"(default: ${BACKEND_ENV}, else local)")
