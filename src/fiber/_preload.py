"""Modules a template process imports before it forks: the local backend's fork server
before it forks jobs (config ``local_preload``), a job of several pool workers before it
forks its workers (config ``pool_preload``).

A module imported before the fork is shared by the children, page for page, until one
writes to it; imported after, it is each child's own. Measured with BipedalWalker (the ES
example's environment, whose module pulls in Box2D and pygame): a forked worker keeps
11.8 MB to itself when it imports them, 6.2 MB when its template did.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from typing import Dict, List, Sequence, Tuple

__all__ = ["NOT_PRELOADED", "auto_preload", "preload_modules", "import_modules"]

#: Never preloaded by "auto": tools that import-time-hook the master, not the jobs' code.
NOT_PRELOADED = frozenset({"pip", "setuptools", "pkg_resources", "pluggy", "iniconfig", "py",
                           "IPython", "ipykernel", "jupyter_client", "jupyter_core", "traitlets",
                           "debugpy", "pydevd", "coverage", "mypy", "ruff", "fiber"})


def auto_preload() -> List[str]:
    """Top-level third-party packages this process has imported from site-packages."""
    import site

    dirs = {os.path.realpath(p) for p in sys.path
            if os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")}
    try:
        dirs.update(os.path.realpath(p) for p in site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv's old site.py
        pass
    roots = tuple(d + os.sep for d in dirs)
    out = []
    for name, module in list(sys.modules.items()):
        if ("." in name or name.startswith("_") or name.startswith("pytest")
                or name in NOT_PRELOADED or module is None):
            continue
        where = getattr(module, "__file__", None)
        if not where:
            paths = list(getattr(module, "__path__", []) or [])
            where = paths[0] if paths else None
        if where and os.path.realpath(where).startswith(roots):
            out.append(name)
    return sorted(out)


def preload_modules(setting: str) -> List[str]:
    """The modules a preload setting names: comma-separated names, ``auto`` (see
    `auto_preload`, read in this process) or empty (none)."""
    if setting.strip().lower() == "auto":
        return auto_preload()
    return [name.strip() for name in setting.split(",") if name.strip()]


def import_modules(names: Sequence[str]) -> Tuple[List[str], Dict[str, str], str]:
    """Import ``names`` in order, each failure kept (a preload is only a saving): the
    names imported, the failures (name -> error), and the first that started a thread
    ("" if none). Importing stops there: a template that forks must hold no thread that
    its children would lack, so the caller says which module it was."""
    imported: List[str] = []
    failed: Dict[str, str] = {}
    threads = threading.active_count()
    for name in names:
        try:
            importlib.import_module(name)
            imported.append(name)
        except BaseException as e:  # noqa: B036 - a preload must never end the template
            failed[name] = f"{type(e).__name__}: {e}"[:500]
        if threading.active_count() > threads:
            return imported, failed, name
    return imported, failed, ""
