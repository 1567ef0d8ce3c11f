"""fiber's logger. By default it shows warnings (a pool worker lost, a task that keeps
killing its worker); ``debug=True`` or ``log_level=debug`` in the config adds its messages
about the machinery, to stderr or ``log_file``. When and where it writes:
docs/contributing/processes.md, "The logger"."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import List, Optional, Tuple

from ._process_state import here
from .config import get_config
from .errors import ConfigError

__all__ = ["log", "info", "warn", "name_process", "open_log", "recent_warnings",
           "program_level", "inherit_level"]

_logger = logging.getLogger("fiber")


@here.after_fork_in_child
def _new_lock() -> None:
    """A forked child may have copied the lock held: it makes its own."""
    here.api.log_lock = threading.Lock()


_FORMAT = ("%(asctime)s.%(msecs)03d fiber %(fiber_process)s[%(process)d] %(threadName)s "
           "%(levelname)s: %(message)s")


def name_process(name: str) -> None:
    """The name this process's lines carry (a job's ``Process.name``), in a job at its
    start: with ``log_file``, its own file (``<log_file>.<name>``) is opened then, so
    that every process has one, as the original fiber's did."""
    here.api.log_process_name = name
    if get_config().log_file:
        _ready()


class _Context(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.fiber_process = here.api.log_process_name
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


def _file_handler(path: str) -> logging.Handler:
    """``path`` opened for appending now, its directory made if missing (as the original
    fiber's): a process's file exists from its start, whether it logs or not."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    return logging.FileHandler(path)


def _handler(log_file: str) -> logging.Handler:
    if not log_file:
        return _StdStream("stderr")
    if log_file == "stdout":
        return _StdStream("stdout")
    name = here.api.log_process_name
    try:
        return _file_handler(f"{log_file}.{name}")
    except OSError as e:
        raise ConfigError("log_file", f"cannot write fiber's log to "
                          f"{log_file}.{name}: {e}") from e


def _configure(strict: bool) -> None:
    """Set fiber's logger up for this process and the config in force. A log file that
    cannot be written raises `ConfigError` if ``strict``; else it is said on
    stderr, once, and the lines go there instead: a message must never fail the code
    that logs it (a job's start, the hub's thread)."""
    api = here.api
    cfg = get_config()
    program_has_handlers = bool(logging.getLogger().handlers) and not cfg.log_file
    ours = [h for h in _logger.handlers if h in api.log_handlers]
    handler: Optional[logging.Handler] = None
    written = True
    if len(ours) == len(_logger.handlers) and not program_has_handlers:
        try:
            handler = _handler(cfg.log_file)
        except ConfigError as e:
            if strict:
                raise
            sys.stderr.write(f"fiber: {e}; its lines go to stderr\n")
            handler, written = _StdStream("stderr"), False
    # a forked job's copy of its parent's handler (another process's file), or that of
    # a log_file changed since
    while api.log_handlers:
        old = api.log_handlers.pop()
        _logger.removeHandler(old)
        old.close()
    if handler is not None:
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%Y-%m-%d %H:%M:%S"))
        handler.addFilter(_Context())
        _logger.addHandler(handler)
        _logger.propagate = False  # not twice (the last-resort handler, a root handler)
        api.log_handlers.append(handler)
    elif program_has_handlers and not any(isinstance(f, _Context) for f in _logger.filters):
        _logger.addFilter(_Context())  # the program's format may use %(fiber_process)s
    level = _config_level()
    if program_level() is None:  # else the level the program gave the logger stays
        _logger.setLevel(level)
    api.log_applied = level
    api.log_configured = (here.pid, api.log_process_name, cfg.log_file, written)


def _config_level() -> int:
    cfg = get_config()
    return logging.DEBUG if cfg.debug else int(getattr(logging, cfg.log_level.upper()))


def _apply_level(level: int) -> None:
    _logger.setLevel(level)
    here.api.log_applied = level


def program_level() -> Optional[int]:
    """The ``fiber`` logger's effective level if the program set the logger's level
    itself (``get_logger().setLevel``, even to ``NOTSET`` to follow the root's), else None
    (the config's ``log_level`` is in force). A job inherits it, as a spawn child of
    multiprocessing inherits its logger's level."""
    applied = here.api.log_applied
    set_here = _logger.level != (logging.NOTSET if applied is None else applied)
    return _logger.getEffectiveLevel() if set_here else None


def inherit_level(level: int) -> None:
    """In a job at its start: the level its parent's program set (`program_level`)."""
    _logger.setLevel(level)


def _stale(log_file: str, strict: bool) -> bool:
    """Whether fiber's logger must be set up (again) for this process and ``log_file``."""
    api = here.api
    configured = api.log_configured
    return configured[:3] != (here.pid, api.log_process_name, log_file) or (
        strict and not configured[3])


def _ready(strict: bool = False) -> None:
    cfg = get_config()
    if _stale(cfg.log_file, strict):
        with here.api.log_lock:  # threads that log at once set it up once
            if _stale(get_config().log_file, strict):
                _configure(strict)
    else:  # the config's level may have changed since (fiber.init, config.override);
        # a level the program set on the logger stays until then
        level = _config_level()
        if level != here.api.log_applied:
            _apply_level(level)


def open_log() -> None:
    """Make this process's log ready now, not at fiber's first message: with
    ``log_file``, its file is opened (its directory made). Called before a job is
    submitted, so that a log file that cannot be written fails the start, not a step
    after the submit.

    Raises:
        ConfigError: ``log_file`` cannot be written.
    """
    _ready(strict=True)


def log(message: str, *args: object) -> None:
    """Log a debug message about fiber's machinery (job, connection, worker events)."""
    _ready()
    if _logger.isEnabledFor(logging.DEBUG):
        _logger.debug(message, *args)


def info(message: str, *args: object) -> None:
    """Log an event a user may want to follow but that is no failure (a pool worker
    retired by its cluster and replaced): shown with ``log_level=info``."""
    _ready()
    if _logger.isEnabledFor(logging.INFO):
        _logger.info(message, *args)


def warn(message: str, *args: object) -> None:
    """Log a warning: something went wrong that fiber recovered from (a worker lost and
    replaced), shown by default (``log_level=error`` hides it)."""
    _ready()
    api = here.api
    api.log_warning_count += 1
    try:
        api.log_recent_warnings.append((time.time(), message % args if args else message))
    except (TypeError, ValueError):
        api.log_recent_warnings.append((time.time(), message))
    if _logger.isEnabledFor(logging.WARNING):
        _logger.warning(message, *args)


@here.for_tests
def _forget_warnings() -> None:
    here.api.log_recent_warnings.clear()
    here.api.log_warning_count = 0


def recent_warnings() -> Tuple[int, List[Tuple[float, str]]]:
    """How many warnings this process logged, and the last ones (oldest first)."""
    return here.api.log_warning_count, list(here.api.log_recent_warnings)
