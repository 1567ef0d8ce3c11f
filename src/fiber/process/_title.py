"""A job's title in ``ps`` and ``top``: ``fiber: PoolWorker-3 of es.py``, not ``python -m
fiber.backends.local._forkserver_template 22``.

Two things name a process there (Linux): its *comm* (15 bytes, what ``top`` and ``ps -o
comm`` show), set with ``prctl(PR_SET_NAME)``, and its command line (``ps aux``,
``/proc/<pid>/cmdline``), which is the memory that held the original ``argv`` strings:
its bounds are in ``/proc/self/stat`` (``arg_start``, ``arg_end``), and the title is
written there, padded with NULs, never past its end (a longer title is cut). Python keeps
its own copy of the arguments (``sys.argv``), so nothing reads that memory again. When
the optional ``setproctitle`` package is installed it does the second part instead (it
also borrows the environment's space, for long titles). No new dependency is needed;
anywhere but Linux this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Any, Callable, List, Optional

__all__ = ["set_title", "title_of"]

_PR_SET_NAME = 15


def title_of(name: str, argv: List[str]) -> str:
    """``fiber: <name> of <program>`` (the program: the main script's file name, or its
    package's for ``python -m package``)."""
    program = os.path.basename(argv[0]) if argv and argv[0] else ""
    if program == "__main__.py":
        program = os.path.basename(os.path.dirname(argv[0]))
    if program in ("", "-c", "-m"):
        program = "python " + (argv[1] if len(argv) > 1 and program == "-m" else program)
    return f"fiber: {name} of {program.strip()}"


def set_title(title: str, comm: str) -> None:
    """Title this process ``title`` (its command line) and ``comm`` (its short name)."""
    if not sys.platform.startswith("linux"):
        return
    if _PRCTL is not None:
        try:
            _PRCTL(_PR_SET_NAME, ctypes.c_char_p(comm.encode()[:15]), 0, 0, 0)
        except OSError:
            pass
    if _SETPROCTITLE is None:
        _write_argv_area(title)
    else:
        _SETPROCTITLE.setproctitle(title)


def _prctl() -> Optional[Callable[..., int]]:
    """libc's ``prctl``, from the symbols this process has already loaded (``dlopen(NULL)``:
    no search for the library, which ``ctypes.util.find_library`` does by running
    ``ldconfig``, milliseconds that every one of a thousand workers would pay)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _setproctitle() -> Optional[Any]:
    try:
        import setproctitle  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return None
    return setproctitle


# Looked up once, at import: the local backend's fork server imports this module before
# it forks its jobs, which then title themselves at no cost.
_PRCTL = _prctl()
_SETPROCTITLE = _setproctitle()


def _write_argv_area(title: str) -> None:
    try:
        with open("/proc/self/stat", "rb") as f:
            text = f.read()
        fields = text[text.rfind(b")") + 2:].split()
        start, end = int(fields[45]), int(fields[46])  # fields 48 and 49 of the line
    except (OSError, ValueError, IndexError):
        return
    size = end - start
    if size <= 1:
        return
    data = title.encode("utf-8", "replace")[:size - 1]
    ctypes.memmove(start, data + b"\0" * (size - len(data)), size)
