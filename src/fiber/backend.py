"""The original fiber's ``fiber.backend`` module, for programs written for it (its
``examples/ring.py`` imports it): its two public functions, on this fiber's backends.
New code uses `fiber.backends`.
"""

from __future__ import annotations

from typing import Optional

from .backends import Backend, environment_backend
from .backends import get_backend as _get_backend
from .config import get_config

__all__ = ["get_backend", "auto_select_backend"]


def auto_select_backend() -> str:
    """The original's answer: ``kubernetes`` inside a pod (``KUBERNETES_SERVICE_HOST``
    set), else the backend in force (the config's ``backend``). Only this function
    answers so: the backend in force stays the configured one inside a pod too (the
    migration guide says why), and `get_backend()` gives that one."""
    return environment_backend() or get_config().backend


def get_backend(name: Optional[str] = None) -> Backend:
    """Backend ``name``, or the one in force.

    Raises:
        fiber.errors.UnknownBackendError: no backend of that name is registered.
    """
    return _get_backend(name or get_config().backend)
