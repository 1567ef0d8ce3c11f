"""One configuration value as a source gives it: converted to its key's type (text from
the environment or ``.fiberconfig``, objects from code) and checked, so that a wrong value
fails when it is read, not at the first ``Pool()``."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import tempfile
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import ConfigError
from . import _registry
from ._compat import suggestion

__all__ = ["LOG_LEVELS", "TLS_MODES", "TLS_FILES", "converted", "checked",
           "check_log_file", "check_tls_files"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
TLS_MODES = ("off", "auto", "on")
TLS_FILES = ("tls_ca_file", "tls_cert_file", "tls_key_file")

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
#: A label of a host name: letters, digits, '-' (not first or last) and '_' (which DNS
#: names hold, and /etc/hosts and container networks use: ``my_service``).
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
#: What a value of each type is, as an error says it expected one.
_EXPECTED = MappingProxyType({
    bool: "a boolean (true or false, 1 or 0, yes or no, on or off)",
    int: "a whole number (int)",
    float: "a number (float)",
    str: "a string (str)",
})


def converted(key: str, typ: Any, value: Any, where: str) -> Any:
    """``value`` of key ``key``, set in ``where``, converted to ``typ``, the key's type.

    Raises:
        ConfigError: it cannot be: the error says what the key expects, not which keys
            exist (the key is one).
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
        raise ConfigError(key, f"expected {_EXPECTED[typ]}, got {value!r}",
                          where=where) from None
    raise AssertionError(f"unsupported config type {typ!r}")  # a bug in Config, not input


def checked(key: str, value: Any, where: str) -> Any:
    """``value`` of key ``key`` (of its type), set in ``where``, once it is checked.

    Raises:
        ConfigError: it is out of the key's range, or names no backend.
    """
    if key == "backend":
        value = _backend(value, where)
    problem = _problem(key, value)
    if problem:
        raise ConfigError(key, problem, where=where)
    return value


def _backend(name: str, where: str) -> str:
    """The name of the backend that ``name`` means: names are case-insensitive, as log
    levels are (``FIBER_BACKEND=LOCAL`` is ``local``).

    Raises:
        ConfigError: no backend has that name: the error names the closest and the
            known ones.
    """
    if not name:
        raise ConfigError("backend", "must not be empty", where=where)
    found = _registry.canonical(name)
    if found is None:
        known = _registry.known()
        raise ConfigError("backend", f"unknown backend {name!r}"
                          + suggestion(name.lower(), known)
                          + f"; known backends: {', '.join(known)}", where=where)
    return found


def _problem(key: str, value: Any) -> str:
    """What is wrong with ``value`` of key ``key``, or ''."""
    if key in ("heartbeat_interval", "heartbeat_timeout", "startup_timeout") and value <= 0:
        return f"must be positive, got {value!r}"
    if key in ("pool_processes", "pool_max_task_retries", "pool_prefetch", "queue_prefetch",
               "spin_us", "pool_worker_lifetime", "pool_renew_margin",
               "pool_late_factor") and value < 0:
        return f"must not be negative, got {value!r}"
    if key == "pool_workers_per_job" and value < 0:
        return f"must be at least 1, or 0 (the pool chooses), got {value!r}"
    if key == "log_level" and value not in LOG_LEVELS:
        return (f"must be one of {', '.join(LOG_LEVELS)}, got {value!r}"
                + suggestion(str(value).lower(), LOG_LEVELS))
    if key == "tls" and value not in TLS_MODES:
        return (f"must be one of {', '.join(TLS_MODES)}, got {value!r}"
                + suggestion(str(value).lower(), TLS_MODES))
    if key == "listen_host" and value:
        return _not_an_address(value)
    if key == "listen_port" and not 0 <= value <= 65535:
        return f"must be a TCP port (0 to 65535), got {value!r}"
    if key == "dashboard" and value:
        host, sep, port = str(value).rpartition(":")
        if not (sep and port.isdigit() and 0 <= int(port) <= 65535):
            return f"must be HOST:PORT (127.0.0.1:0: a free port), got {value!r}"
    return ""


def _not_an_address(host: str) -> str:
    """What makes ``host`` no address this process can listen on (an IP address or a host
    name, as ``socket.bind`` takes, which jobs are told to connect to), or ''. A name of
    digits and dots is an IPv4 address or nothing: a host name's last label is never
    all digits (RFC 1123)."""
    if ":" in host:
        if host.startswith("["):
            return f"{host!r} is not an IP address: write an IPv6 address without brackets"
        if host.count(":") == 1:
            return (f"{host!r} is not an IP address: listen_host takes no port "
                    "(listen_port sets it)")
        try:
            ipaddress.IPv6Address(host)
        except ValueError as e:
            return f"{host!r} is not an IPv6 address ({e})"
        return ""
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError as e:
            return f"{host!r} is not an IPv4 address ({e})"
        return ""
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return (f"{host!r} is neither an IP address nor a host name (letters, digits, '-' "
                "and '_' in labels separated by dots)")
    try:
        interfaces = {name for _, name in socket.if_nameindex()}
    except OSError:  # a platform or sandbox that does not say
        interfaces = set()
    if host in interfaces:
        return (f"{host!r} is a network interface of this host, not an address: give the "
                f"interface's address (ip -brief address show {host})")
    return ""


def check_tls_files(files: Mapping[str, str], origins: Mapping[str, str]) -> None:
    """That a config's TLS file keys (``files``: key -> path, '' unset) set a site's
    files all three, or none; ``origins`` says where each key was set.

    Raises:
        ConfigError: some are set, not all: it names those missing.
    """
    given = [key for key in TLS_FILES if files[key]]
    if given and len(given) < len(TLS_FILES):
        missing = [key for key in TLS_FILES if key not in given]
        raise ConfigError(given[0], f"a site's own TLS files are set with all three of "
                          f"{', '.join(TLS_FILES)}; missing: {', '.join(missing)}",
                          where=origins.get(given[0], ""))


def check_log_file(path: str, where: str) -> None:
    """That fiber's log files can be written where ``log_file`` ``path`` (set in
    ``where``) puts them: ``<path>.<process name>``, in its folder, made if missing.
    Checked when the config is read, so that the program that set it learns it there,
    not from a pool's thread that starts workers, nor a line that says the log goes to
    stderr instead; nothing is left behind (a folder made in the nearest one that exists,
    then removed): the log opens its file at the first ``start()``.

    Raises:
        ConfigError: the folder cannot be made, or written.
    """
    if not path or path == "stdout":
        return
    folder = os.path.dirname(path) or "."
    existing = folder
    while not os.path.exists(existing):
        existing = os.path.dirname(existing) or "."
    if not os.path.isdir(existing):
        problem = f"cannot make the folder {folder} of fiber's log: {existing} is not a folder"
    else:
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".fiber-log-check-", dir=existing))
            return
        except OSError as e:
            problem = (f"cannot write fiber's log in {folder} ({e.strerror})"
                       if existing == folder else f"cannot make the folder {folder} of "
                       f"fiber's log in {existing} ({e.strerror})")
    raise ConfigError("log_file", problem + "; choose a path in a folder you can write, or "
                      "leave log_file empty for stderr", where=where)
