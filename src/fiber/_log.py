"""fiber's logger. Quiet by default; ``debug=True`` or ``log_level=debug`` in the config
turns on its messages about the machinery, to stderr or ``log_file``.

Nothing is configured at import: the handler is attached the first time fiber logs in a
process. Each line has a timestamp, the process's name and pid, and the thread. Secrets
are never passed to the logger.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import List

__all__ = ["log", "name_process"]

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


def _handler(log_file: str) -> logging.Handler:
    if not log_file:
        return logging.StreamHandler(sys.stderr)
    if log_file == "stdout":
        return logging.StreamHandler(sys.stdout)
    return logging.FileHandler(f"{log_file}.{_process_name}", delay=True)


def _configure() -> None:
    from .config import get_config

    cfg = get_config()
    level = logging.DEBUG if cfg.debug else getattr(logging, cfg.log_level.upper())
    _logger.setLevel(level)
    if level <= logging.DEBUG and not _logger.handlers:
        handler = _handler(cfg.log_file)
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
        handler.addFilter(_Context())
        _logger.addHandler(handler)
        _ours.append(handler)


def log(message: str, *args: object) -> None:
    """Log a debug message about fiber's machinery (job, connection, worker events)."""
    global _configured_pid
    if _configured_pid != os.getpid():
        _configured_pid = os.getpid()
        while _ours:  # a forked job's copy of its parent's (another process's file)
            _logger.removeHandler(_ours.pop())
        _configure()
    if _logger.isEnabledFor(logging.DEBUG):
        _logger.debug(message, *args)
