"""Configuration written for the original fiber, and ``FIBER_*`` variables that are not
settings: what ``fiber.config`` accepts besides its own keys, and what it warns about.

Programs and ``.fiberconfig`` files written for the original fiber (same import name) use
keys that were renamed here. They keep working: each old key is read as its new one,
with a `FutureWarning` naming the new key, once per process. Keys of the original
that have no counterpart are accepted with a warning that they have no effect, never
silently. Nothing here imports the rest of fiber.
"""

from __future__ import annotations

import difflib
import os
import sys
import types
import warnings
from types import MappingProxyType
from typing import Any, Callable, Collection, Dict, Iterable, Mapping, Optional, Tuple

from .._process_state import here

__all__ = ["RENAMED", "NO_EFFECT", "NO_EFFECT_DEFAULTS", "translate", "read_old",
           "unknown_variables", "suggestion", "warn_once"]

#: Keys of the original fiber read as a key of this one.
RENAMED: Mapping[str, str] = MappingProxyType({
    "default_backend": "backend",
    "default_image": "image",
    "mem_per_job": "memory_per_job_mb",
    "ipc_admin_master_port": "listen_port",
})

#: Keys of the original fiber that have no effect here, and why.
NO_EFFECT: Mapping[str, str] = MappingProxyType({
    "merge_output": "every job's output goes to the program's own stdout/stderr",
    "use_bash": "jobs start the interpreter directly",
    "ipc_active": "jobs always connect to their parent",
    "ipc_admin_worker_port": "jobs always connect to their parent",
    "use_push_queue": "pools always push tasks to their workers",
})

#: ``FIBER_*`` variables that are not settings: set by fiber for its jobs, or read by
#: fiber's own scripts (scripts/: the test clusters). Names ending in ``_`` are prefixes.
NOT_SETTINGS = frozenset({
    "FIBER_SECRET", "FIBER_TLS_CREDENTIALS", "FIBER_JOB", "FIBER_JOB_HOST", "FIBER_PARENT",
    "FIBER_WORKER", "FIBER_ANCHOR_FD", "FIBER_PROCESS_ID", "FIBER_OUTPUT", "FIBER_JOB_LOG",
    "FIBER_NETNS_HOSTS", "FIBER_EXTRAS", "FIBER_INSTALL", "FIBER_CONSTRAINTS",
    "FIBER_K8S_", "FIBER_TEST_",
})

#: What reading a no-effect key gives when the program has not set it: the original's
#: default (the original documented reading ``fiber.config.<key>``).
NO_EFFECT_DEFAULTS: Mapping[str, Any] = MappingProxyType({
    "merge_output": False, "use_bash": False, "ipc_active": True,
    "ipc_admin_worker_port": 8000, "use_push_queue": True,
})

_LOG_LEVELS = MappingProxyType({"10": "debug", "20": "info", "30": "warning", "40": "error",
                                "50": "critical"})
here.for_tests(here.api.compat_warned.clear)  # a test sees the warning its own use of a key gives


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # fiber/


def _outside_fiber() -> int:
    """The ``stacklevel`` of the first frame not in fiber's code: the user's line."""
    frame: Optional[types.FrameType] = sys._getframe(2)  # noqa: SLF001 - the stdlib's way
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


def warn_once(key: str, message: str, category: type = FutureWarning) -> None:
    """Warn with ``message`` the first time ``key`` comes up in this process, from the
    user's line that led to it."""
    warned = here.api.compat_warned
    if key not in warned:
        warned.add(key)
        warnings.warn(message, category, stacklevel=_outside_fiber())


def suggestion(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean X?)`` for the closest of ``choices``, or ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _warn_old(key: str, where: str) -> None:
    """The one-time warning for ``key``, one of the original fiber's renamed or no-effect
    keys, set or read (``where``)."""
    if key in RENAMED:
        new = RENAMED[key]
        warn_once(f"renamed:{key}", f"fiber config {key!r} ({where}) is the original fiber's "
                  f"name of {new!r}; use {new!r}")
    else:
        warn_once(f"no-effect:{key}", f"fiber config {key!r} ({where}) of the original fiber "
                  f"has no effect here: {NO_EFFECT[key]}")


def translate(key: str, value: Any, where: str) -> Optional[Tuple[str, Any]]:
    """The key and value of this fiber that ``key`` of the original fiber means (with a
    one-time warning), None for a key that has no effect (warned too), or ``(key,
    value)`` unchanged for any other key. ``where`` says where it was set."""
    if key in RENAMED:
        _warn_old(key, where)
        return RENAMED[key], value
    if key in NO_EFFECT:
        _warn_old(key, where)
        here.api.compat_no_effect_set[key] = _typed(key, value)
        return None
    if key == "log_level" and isinstance(value, int) and not isinstance(value, bool):
        # logging.DEBUG and so on; another number is named as a wrong level
        return key, _LOG_LEVELS.get(str(value), str(value))
    if key == "log_level" and isinstance(value, str):
        # "INFO", as the original's own demo config spells it, or "20"
        word = value.strip()
        return key, _LOG_LEVELS.get(word, word.lower())
    return key, value


def _typed(key: str, value: Any) -> Any:
    """``value`` of no-effect ``key`` as the original read it from a file or the
    environment: a bool or an int when its default is one (``ipc_active=False``)."""
    default = NO_EFFECT_DEFAULTS.get(key)
    if not isinstance(value, str):
        return value
    word = value.strip().lower()
    if isinstance(default, bool) and word in ("1", "true", "yes", "on", "0", "false", "no",
                                              "off"):
        return word in ("1", "true", "yes", "on")
    if isinstance(default, int) and not isinstance(default, bool) and word.isdigit():
        return int(word)
    return value


def read_old(key: str, read: Callable[[str], Any]) -> Any:
    """The value of the original fiber's ``key`` (``fiber.config.default_backend``):
    its new key's, read with ``read``, or for a key without effect what the program set
    (else the original's default); with the warning that key gets when set.

    Raises:
        KeyError: ``key`` is not one of the original's keys that this fiber lacks.
    """
    if key not in RENAMED and key not in NO_EFFECT:
        raise KeyError(key)
    _warn_old(key, "read")
    if key in NO_EFFECT:
        return here.api.compat_no_effect_set.get(key, NO_EFFECT_DEFAULTS.get(key))
    value = read(RENAMED[key])
    return None if key == "mem_per_job" and not value else value  # unset: None


def unknown_variables(environ: Mapping[str, str], keys: Collection[str],
                      others: Collection[str] = ()) -> Dict[str, str]:
    """``FIBER_*`` variables of ``environ`` that are neither a setting (of ``keys`` or of
    the original fiber) nor one of `NOT_SETTINGS` or ``others`` (a backend's own:
    see ``Backend.settings``): name -> a did-you-mean hint."""
    names = [f"FIBER_{k.upper()}" for k in (*keys, *RENAMED, *NO_EFFECT)]
    out = {}
    for name in environ:
        if (not name.startswith("FIBER_") or name in names or name in NOT_SETTINGS
                or name in others):
            continue
        if any(p.endswith("_") and name.startswith(p) for p in NOT_SETTINGS):
            continue
        out[name] = suggestion(name, names)
    return out


def in_a_job(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process is a fiber job (its parent already warned about its config)."""
    return bool(environ.get("FIBER_PARENT"))
