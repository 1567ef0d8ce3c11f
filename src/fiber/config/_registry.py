"""Which backends exist, and the settings each one declares.

A backend is one folder and one entry point: ``name = "package.module:BackendClass"`` in
the ``fiber.backends`` group (fiber's own are in its ``pyproject.toml``; a third-party one
in its package's). The entry points are the registry; `register` adds a class in
this process only (tests, a plugin without an installed distribution). A backend class may
declare ``settings``, a frozen dataclass of its own configuration keys: ``<name>_<key>``
for ``fiber.init`` and ``FIBER_<NAME>_<KEY>``, ``[fiber.<name>]`` in ``.fiberconfig``.

This lives with the configuration because resolving a key (``slurm_partition``) needs the
settings class of the backend it names, before any backend is used; the backends package
(``fiber.backends``: ``get_backend``, ``register_backend``) is built on it. A class is
loaded by its entry point's name, at first use: resolving settings imports the backend's
module, which imports its cluster's client only when it talks to the cluster.
"""

from __future__ import annotations

import functools
import importlib
import sys
from typing import Any, Dict, List, Optional

from .._process_state import here

__all__ = ["GROUP", "known", "canonical", "load", "register", "settings_class", "key_prefix"]

GROUP = "fiber.backends"


@functools.lru_cache(maxsize=1)
def _entry_points() -> Dict[str, str]:
    """The group's entry points, read once a process (a scan of installed metadata)."""
    from importlib import metadata

    if sys.version_info >= (3, 10):
        eps = metadata.entry_points(group=GROUP)
    else:  # pragma: no cover - Python 3.9
        eps = metadata.entry_points().get(GROUP, [])
    return {ep.name: ep.value for ep in eps}


def known() -> List[str]:
    """The names of every backend this process can create, sorted."""
    with here.api.registry_lock:
        names = set(here.api.registered_backends)
    return sorted(names | set(_entry_points()))


def canonical(name: str) -> Optional[str]:
    """The name of the backend that ``name`` means, or None if no backend has it. Names
    are case-insensitive (``SLURM`` is ``slurm``, ``mycluster`` a third party's
    ``MyCluster``), as log levels are; this is the one place they are matched. Two names
    that differ only in case match exactly only (``FOO`` then means neither)."""
    names = known()
    if not isinstance(name, str):
        return None
    if name in names:
        return name
    folded = [known_name for known_name in names if known_name.casefold() == name.casefold()]
    return folded[0] if len(folded) == 1 else None


def register(name: str, cls: Any) -> None:
    """Make ``cls`` backend ``name`` in this process (replacing any of that name)."""
    with here.api.registry_lock:
        here.api.registered_backends[name] = cls


def load(name: str) -> Optional[Any]:
    """Backend ``name``'s class, or None if no backend has that name.

    Raises:
        ImportError, AttributeError: its entry point names a module or class that is not
            there (a broken installation): the error says which.
    """
    with here.api.registry_lock:
        cls = here.api.registered_backends.get(name)
    if cls is not None:
        return cls
    target = _entry_points().get(name)
    if target is None:
        return None
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def key_prefix(name: str) -> str:
    """How backend ``name``'s keys begin: ``slurm_`` (a ``-`` of the name is ``_``, and
    keys are lower case, as ``FIBER_*`` variables are read: ``MyCluster``'s are
    ``mycluster_``)."""
    return name.replace("-", "_").lower() + "_"


def settings_class(name: str) -> Optional[type]:
    """The settings dataclass that backend ``name``'s class itself declares (a subclass
    of another backend that declares none of its own has none), or None."""
    cls = load(name)
    if cls is None:
        return None
    own: Optional[type] = vars(cls).get("settings")
    return own
