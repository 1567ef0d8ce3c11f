"""fiber's logger. By default it shows warnings (a pool worker lost, a task that keeps
killing its worker); ``debug=True`` or ``log_level=debug`` in the config adds its messages
about the machinery, to stderr or ``log_file``.

Nothing is configured at import: the handler is attached the first time fiber logs in a
process. Each line has a timestamp, the process's name and pid, and the thread. When the
program has configured logging itself (the root logger has a handler) and ``log_file``
is not set, fiber's records go to the program's handlers instead (the ``fiber`` logger
propagates), not twice. Secrets are never passed to the logger.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import List

__all__ = ["log", "warn", "name_process"]

_logger = logging.getLogger("fiber")
_configured_pid = 0
_process_name = "MainProcess"
#: The handler this module added, in this process or the one forked from.
_ours: List[logging.Handler] = []
_FORMAT = ("%(asctime)s.%(msecs)03d fiber %(fiber_process)s[%(process)d] %(threadName)s "
           "%(levelname)s: %(message)s")


def name_process(name: str) -> None:
    """The name this process's lines carry (a job's ``Process.name``)."""
    global _process_name
    _process_name = name


class _Context(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.fiber_process = _process_name
        return True


class _StdStream(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` (or ``sys.stdout``) as it is when a record comes, not as
    it was when the handler was made: a program (or a test) may replace it meanwhile."""

    def __init__(self, name: str) -> None:
        self._std = name
        super().__init__()

    @property
    def stream(self) -> object:
        return getattr(sys, self._std)

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def _handler(log_file: str) -> logging.Handler:
    if not log_file:
        return _StdStream("stderr")
    if log_file == "stdout":
        return _StdStream("stdout")
    return logging.FileHandler(f"{log_file}.{_process_name}", delay=True)


def _configure() -> None:
    from .config import get_config

    cfg = get_config()
    level = logging.DEBUG if cfg.debug else getattr(logging, cfg.log_level.upper())
    _logger.setLevel(level)
    program_has_handlers = bool(logging.getLogger().handlers) and not cfg.log_file
    if not _logger.handlers and not program_has_handlers:
        handler = _handler(cfg.log_file)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
        handler.addFilter(_Context())
        _logger.addHandler(handler)
        _logger.propagate = False  # not twice (the last-resort handler, a root handler)
        _ours.append(handler)
    elif program_has_handlers and not any(isinstance(f, _Context) for f in _logger.filters):
        _logger.addFilter(_Context())  # the program's format may use %(fiber_process)s


def _ready() -> None:
    global _configured_pid
    if _configured_pid != os.getpid():
        _configured_pid = os.getpid()
        while _ours:  # a forked job's copy of its parent's (another process's file)
            _logger.removeHandler(_ours.pop())
        _configure()
    else:  # the config may have changed since (fiber.init, config.override)
        from .config import get_config

        cfg = get_config()
        level = logging.DEBUG if cfg.debug else getattr(logging, cfg.log_level.upper())
        if _logger.level != level:
            _logger.setLevel(level)


def log(message: str, *args: object) -> None:
    """Log a debug message about fiber's machinery (job, connection, worker events)."""
    _ready()
    if _logger.isEnabledFor(logging.DEBUG):
        _logger.debug(message, *args)


def warn(message: str, *args: object) -> None:
    """Log a warning: something went wrong that fiber recovered from (a worker lost and
    replaced), shown by default (``log_level=error`` hides it)."""
    _ready()
    if _logger.isEnabledFor(logging.WARNING):
        _logger.warning(message, *args)
