"""Backends: the layer that creates, watches and ends jobs on one cluster manager.

Built-in backends are listed in ``_BUILTIN``; third-party ones register under the
``fiber.backends`` entry-point group (``name = "package.module:BackendClass"``). One
instance per backend name lives in a process, created on first use.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Dict, List, Type

from .._exports import publish
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

__all__ = [
    "Backend",
    "JobHandle",
    "JobInfo",
    "JobOutput",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobWatcher",
    "Resources",
    "get_backend",
    "known_backends",
    "register_backend",
]

publish(__name__, Backend, JobHandle, JobInfo, JobOutput, JobSpec, JobState, JobStatus,
        JobWatcher, Resources)

_BUILTIN: Dict[str, str] = {
    "local": "fiber.backends.local:LocalBackend",
    "slurm": "fiber.backends.slurm:SlurmBackend",
    "docker": "fiber.backends.docker:DockerBackend",
    "kubernetes": "fiber.backends.kubernetes:KubernetesBackend",
}

_extra: Dict[str, Type[Backend]] = {}
_instances: Dict[str, Backend] = {}
_lock = threading.Lock()


def _entry_points() -> Dict[str, str]:
    from importlib import metadata

    if sys.version_info >= (3, 10):
        eps = metadata.entry_points(group="fiber.backends")
    else:  # pragma: no cover - Python 3.9
        eps = metadata.entry_points().get("fiber.backends", [])
    return {ep.name: ep.value for ep in eps}


def known_backends() -> List[str]:
    """Names of every backend this process can create."""
    return sorted({*_BUILTIN, *_extra, *_entry_points()})


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
    with _lock:
        _extra[name] = cls
        _instances.pop(name, None)


def _load(name: str) -> Type[Backend]:
    if name in _extra:
        return _extra[name]
    target = _BUILTIN.get(name) or _entry_points().get(name)
    if target is None:
        raise UnknownBackendError(name, known_backends())
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]


def get_backend(name: str) -> Backend:
    """The process-wide instance of backend ``name``.

    Raises:
        UnknownBackendError: no backend of that name is registered.
    """
    with _lock:
        inst = _instances.get(name)
        if inst is None:
            inst = _instances[name] = _load(name)()
        return inst
