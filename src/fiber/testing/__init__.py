"""Helpers for testing fiber backends: ``fiber.testing.conformance``, the API suite every
backend must pass, run with pytest (``pytest --pyargs fiber.testing.conformance
--fiber-backend NAME``).

What serves only fiber's own tests and benchmarks (the netns test hosts, the link shaper,
the stand-in workers, the runner of CPython's suite) is in the repository's
``tests/fiber_ci``, not in the package. Nothing here is imported by ``import fiber``.
"""
