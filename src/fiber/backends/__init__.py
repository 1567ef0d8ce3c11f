"""Backends: the layer that creates, watches and ends jobs on one cluster manager.

A backend is one folder and one entry point in the ``fiber.backends`` group (``name =
"package.module:BackendClass"``): fiber's own (local, slurm, sge, ssh, docker,
kubernetes) are registered so by its ``pyproject.toml``, a third-party one by its
package's, and nothing else lists them (the configuration reads them too: a backend's own
keys). One instance
per backend name lives in a process (``here.jobs.backend_instances``), created on first
use.
"""

from __future__ import annotations

import os
from typing import List, Optional, Type

from .._exports import publish
from .._process_state import here
from ..config import _registry
from ..errors import UnknownBackendError
from ._base import (
    Backend,
    JobHandle,
    JobInfo,
    JobOutput,
    JobSpec,
    JobState,
    JobStatus,
    JobWatcher,
    Resources,
)
from ._cli_backend import CommandLineBackend

__all__ = [
    "Backend",
    "CommandLineBackend",
    "JobHandle",
    "JobInfo",
    "JobOutput",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobWatcher",
    "Resources",
    "environment_backend",
    "get_backend",
    "known_backends",
    "register_backend",
    "registered_name",
]

publish(__name__, Backend, CommandLineBackend, JobHandle, JobInfo, JobOutput, JobSpec,
        JobState, JobStatus, JobWatcher, Resources)

def known_backends() -> List[str]:
    """Names of every backend this process can create: the ``fiber.backends`` entry
    points (fiber's own among them) and those registered here."""
    return _registry.known()


def registered_name(name: str) -> Optional[str]:
    """The name of the backend that ``name`` means, or None if there is none: names are
    case-insensitive (``SLURM`` is ``slurm``)."""
    return _registry.canonical(name)


def register_backend(name: str, cls: Type[Backend]) -> None:
    """Register a backend class in this process (tests, plugins without entry points).

    It replaces any backend of that name, built-in or not, in this process only: a job
    that starts processes of its own looks the name up in its own process, where it must
    be registered too (the ``fiber.backends`` entry-point group reaches every process).

    Raises:
        TypeError: ``cls`` is not a `Backend` subclass.
    """
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"{cls!r} is not a fiber.backends.Backend subclass")
    with here.jobs.backends_lock:
        _registry.register(name, cls)
        here.jobs.backend_instances.pop(name, None)


def environment_backend() -> Optional[str]:
    """The backend whose cluster this process runs inside, as that cluster's environment
    says (a Kubernetes pod: ``KUBERNETES_SERVICE_HOST``), or None. The original fiber
    chose its backend so; here only ``fiber.backend.auto_select_backend`` asks."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    return None


def _load(name: str) -> Type[Backend]:
    cls = _registry.load(name)
    if cls is None:
        raise UnknownBackendError(name, known_backends())
    return cls  # type: ignore[no-any-return]


def get_backend(name: str) -> Backend:
    """The process-wide instance of backend ``name`` (in any case: ``SLURM`` is
    ``slurm``).

    Raises:
        UnknownBackendError: no backend of that name is registered.
    """
    name = registered_name(name) or name
    instances = here.jobs.backend_instances
    with here.jobs.backends_lock:
        inst = instances.get(name)
        if inst is None:
            inst = instances[name] = _load(name)()
        return inst
