"""fiber's conformance suite: the multiprocessing-API tests every backend must pass.

Every test here takes the ``ctx`` fixture, the context of the backend under test, so the
whole suite runs on any backend fiber can find by name; a backend's author runs it
against theirs, from any directory, with fiber installed with its ``test`` extra (from
fiber's checkout, or ``pip install 'fiber_cluster-VERSION-py3-none-any.whl[test]'``)::

    pip install '.[test]'
    pytest --pyargs fiber.testing.conformance --fiber-backend NAME [-m "not local_pids"]

- ``conftest.py``: the suite's markers, fixtures and leak check (from `.fixtures`);
  ``--fiber-backend`` is the option of fiber's pytest plugin (`.plugin`).
- ``support``: what the tests and their jobs import (targets of jobs, ``wait_until``).
- ``test_*.py``: the tests. Their jobs import them by module path
  (``fiber.testing.conformance.test_pool``): they run wherever fiber is installed.

A backend whose engine can start inside the test process gives its class a classmethod
``test_engine()`` (see `.fixtures`, and `fiber.testing.netns.NetnsBackend.test_engine`);
for any other, its author starts the engine and points fiber at it through the
environment before running the suite. Nothing here is imported by ``import fiber``.
"""
