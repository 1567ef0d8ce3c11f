"""The configuration keys that backends declare: ``<backend>_<key>``.

A backend's ``settings`` dataclass (see `_registry`) names its keys, their types,
defaults and meanings (``#:`` comments). Its keys are read wherever the core's are, under
the backend's prefix: ``fiber.init(slurm_partition="gpu")``, ``FIBER_SLURM_PARTITION``,
``partition`` in a ``[fiber.slurm]`` section of ``.fiberconfig`` (or ``slurm_partition`` in
``[fiber]``). The resolved values travel in ``Config.backends`` (``{backend: {key:
value}}``, the keys set only); a backend reads them with ``fiber.config.settings``.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError
from . import _registry
from ._compat import suggestion

__all__ = ["split", "field_type", "backend_keys", "checked", "machine_keys", "variables"]


def split(key: str) -> Optional[Tuple[str, str, type]]:
    """``(backend, its key, its settings class)`` of a full key (``slurm_partition``), or
    None when no backend with settings of its own has that prefix."""
    for name in sorted(_registry.known(), key=len, reverse=True):
        prefix = _registry.key_prefix(name)
        if key.startswith(prefix) and len(key) > len(prefix):
            cls = _registry.settings_class(name)
            return None if cls is None else (name, key[len(prefix):], cls)
    return None


def _keys_of(name: str, cls: type) -> List[str]:
    return [_registry.key_prefix(name) + f.name for f in dataclasses.fields(cls)]


def backend_keys() -> List[str]:
    """Every full key of every backend this process knows (for a did-you-mean)."""
    out: List[str] = []
    for name in _registry.known():
        cls = _registry.settings_class(name)
        if cls is not None:
            out += _keys_of(name, cls)
    return out


def field_type(key: str, where: str = "") -> Tuple[str, str, Any]:
    """``(backend, its key, the key's type)`` of backend key ``key`` (set in ``where``).

    Raises:
        ConfigError: no backend declares it: the message names the closest key and the
            valid ones (of that backend, when the prefix is one).
    """
    found = split(key)
    if found is None:
        raise LookupError(key)
    name, sub, cls = found
    hints = typing.get_type_hints(cls)
    if sub not in hints or sub not in {f.name for f in dataclasses.fields(cls)}:
        valid = _keys_of(name, cls)
        raise ConfigError(key, f"unknown key of the {name} backend" + suggestion(key, valid),
                          valid=valid, where=where)
    return name, sub, hints[sub]


def checked(values: Mapping[str, Mapping[str, Any]],
            origins: Optional[Mapping[str, str]] = None) -> Dict[str, Dict[str, Any]]:
    """``values`` once each backend's settings accept them (its own checks: a timeout
    that must be positive...); ``origins`` says where each full key was set.

    Raises:
        ConfigError: a backend refuses a value (named by its full key, and where it was
            set, when it can tell).
    """
    out: Dict[str, Dict[str, Any]] = {}
    for name, given in values.items():
        cls = _registry.settings_class(name)
        if cls is None:
            continue
        try:
            cls(**given)
        except (TypeError, ValueError) as e:
            word = str(e).split(" ", 1)[0]
            key = (_registry.key_prefix(name) + (word if word in given else "")).rstrip("_")
            raise ConfigError(key, str(e), where=(origins or {}).get(key, "")) from None
        out[name] = dict(given)
    return out


def machine_keys(name: str) -> List[str]:
    """Backend ``name``'s keys that name this machine's files or addresses (field
    metadata ``machine``): a process elsewhere must not inherit them."""
    cls = _registry.settings_class(name)
    if cls is None:
        return []
    return [f.name for f in dataclasses.fields(cls) if f.metadata.get("machine")]


def variables(names: List[str]) -> List[str]:
    """Those of the ``FIBER_*`` variable ``names`` that a backend says are its own and
    not settings (its settings class's ``variables``: set for its jobs, or read by its
    test cluster's scripts)."""
    out = []
    for name in names:
        found = split(name[len("FIBER_"):].lower())
        if found is not None and name in getattr(found[2], "variables", ()):
            out.append(name)
    return out
