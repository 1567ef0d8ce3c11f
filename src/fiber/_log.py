"""fiber's logger. Quiet by default; ``debug=True`` in the config sends it to stderr.

Nothing is configured at import: the handler is attached the first time fiber logs in a
process whose config asks for it. Secrets are never passed to the logger.
"""

from __future__ import annotations

import logging
import os

__all__ = ["log"]

_logger = logging.getLogger("fiber")
_configured_pid = 0


def log(message: str, *args: object) -> None:
    """Log a debug message about fiber's machinery (job, connection, worker events)."""
    global _configured_pid
    if _configured_pid != os.getpid():
        _configured_pid = os.getpid()
        from .config import get_config

        if get_config().debug and not _logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(
                "fiber %(process)d %(threadName)s: %(message)s"))
            _logger.addHandler(handler)
            _logger.setLevel(logging.DEBUG)
    if _logger.isEnabledFor(logging.DEBUG):
        _logger.debug(message, *args)
