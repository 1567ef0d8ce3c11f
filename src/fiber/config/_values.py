"""One configuration value as a source gives it: converted to its key's type (text from
the environment or ``.fiberconfig``, objects from code) and checked, so that a wrong value
fails when it is read, not at the first ``Pool()``."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError
from ._compat import suggestion

__all__ = ["LOG_LEVELS", "converted", "checked"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def converted(key: str, typ: Any, value: Any, valid: Any) -> Any:
    """``value`` converted to ``typ``, the type of key ``key``.

    Raises:
        ConfigError: it cannot be.
    """
    try:
        if typ is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return value.strip().lower() in _TRUE
            raise ValueError(value)
        if typ is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(value)
        if typ is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if typ is str:
            if not isinstance(value, str):
                raise ValueError(value)
            return value
    except (TypeError, ValueError):
        raise ConfigError(
            key, f"expected {typ.__name__}, got {value!r}", valid=valid
        ) from None
    raise AssertionError(f"unsupported config type {typ!r}")  # a bug in Config, not input


def checked(key: str, value: Any) -> Any:
    """``value`` of key ``key`` (of its type) once it is checked.

    Raises:
        ConfigError: it is out of the key's range.
    """
    if key == "backend" and not value:
        raise ConfigError(key, "must not be empty")
    if key in ("heartbeat_interval", "heartbeat_timeout", "startup_timeout") and value <= 0:
        raise ConfigError(key, f"must be positive, got {value!r}")
    if key in ("pool_processes", "pool_max_task_retries", "pool_prefetch", "queue_prefetch",
               "spin_us", "pool_worker_lifetime", "pool_renew_margin") and value < 0:
        raise ConfigError(key, f"must not be negative, got {value!r}")
    if key == "log_level" and value not in LOG_LEVELS:
        raise ConfigError(key, f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}"
                          + suggestion(str(value).lower(), LOG_LEVELS))
    if key == "listen_port" and not 0 <= value <= 65535:
        raise ConfigError(key, f"must be a TCP port (0 to 65535), got {value!r}")
    if key == "dashboard" and value:
        host, sep, port = str(value).rpartition(":")
        if not (sep and port.isdigit() and 0 <= int(port) <= 65535):
            raise ConfigError(key, f"must be HOST:PORT (127.0.0.1:0: a free port), "
                              f"got {value!r}")
    return value
