"""Helpers for testing fiber programs and fiber itself.

- `fiber.testing.netns`: several "hosts" on one Linux machine (network namespaces
  joined by a bridge, root only) and the ``netns`` backend that runs every job in one of
  them, so that multi-host behaviour (addresses, partitions, killed hosts) can be tested
  without a cluster.
- `fiber.testing.standins`: the ``standins`` backend, whose jobs are simulated pool
  workers (thousands per stand-in process, each a real connection speaking the real
  protocol, each task a timer), so that a real master can be measured at sizes this
  machine cannot hold as processes (``benchmarks/master_scale.py``).
- ``fiber.testing.conformance``: the API suite every backend must pass, run with pytest
  (``pytest --pyargs fiber.testing.conformance --fiber-backend NAME``).

Nothing here is imported by ``import fiber``.
"""
