"""Public classes carry the name of the package that exports them.

A class defined in a private module (``fiber.pool._pool``) and exported by its package
(``fiber.pool``) is given the package as ``__module__``, so that its repr, its pickles
(classes pickle by reference) and its documentation show the public name, which stays
when the private modules change. Called at the end of each package's ``__init__``.
"""

from __future__ import annotations

__all__ = ["publish"]


def publish(module: str, *classes: type) -> None:
    """Give each of ``classes`` the public module ``module`` (where it must be exported)."""
    for cls in classes:
        cls.__module__ = module
