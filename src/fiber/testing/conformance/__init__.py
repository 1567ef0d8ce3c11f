"""fiber's conformance suite: the multiprocessing-API tests every backend must pass.

Every test here takes the ``ctx`` fixture, the context of the backend under test, so the
whole suite runs on any backend fiber can find by name; a backend's author runs it
against theirs, from any directory, with fiber installed with its ``test`` extra (from
fiber's checkout, or ``pip install 'fiber_cluster-VERSION-py3-none-any.whl[test]'``).

Its layout and test engines: docs/contributing/testing.md."""
