"""The original fiber's ``fiber.backend`` module, for programs written for it (its
``examples/ring.py`` imports it): its two public functions, on this fiber's backends.
New code uses `fiber.backends`.
"""

from __future__ import annotations

from typing import Optional

from .backends import Backend
from .backends import get_backend as _get_backend
from .config import get_config

__all__ = ["get_backend", "auto_select_backend"]


def auto_select_backend() -> str:
    """The name of the backend in force (the config's ``backend``). The original also
    chose ``kubernetes`` inside a pod; this fiber does not: see the migration guide."""
    return get_config().backend


def get_backend(name: Optional[str] = None) -> Backend:
    """Backend ``name``, or the one in force.

    Raises:
        fiber.errors.UnknownBackendError: no backend of that name is registered.
    """
    return _get_backend(name or auto_select_backend())
