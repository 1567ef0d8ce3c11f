"""One globals namespace for the functions of the program's ``__main__`` rebuilt here, so
that a Pool's initializer and its tasks see each other's globals, as in a
``multiprocessing`` worker that imported the main script. The merge rule:
docs/contributing/transport.md, "The main script's namespace". It and what this module
keeps with it are in ``here.transport`` (``main_namespace``: `fiber._state.transport`)."""

from __future__ import annotations

import builtins
import linecache
import os
import types
from typing import Any, Callable, Dict, Optional

from .._process_state import here

__all__ = ["make_function", "set_function_state", "fetch_sources_with"]


def make_function(code: types.CodeType, base_globals: Dict[str, object], name: str,
                  cells: int) -> types.FunctionType:
    """A function of ``__main__`` with ``here.transport.main_namespace`` for its globals,
    and ``cells`` empty closure cells (`set_function_state` fills them, and the rest).

    ``base_globals`` holds the module attributes that relative imports need (``__name__``,
    ``__file__``, ...); they are set once, by the first function of ``__main__`` rebuilt.
    """
    namespace = here.transport.main_namespace
    with here.transport.main_namespace_lock:
        for key, value in base_globals.items():
            namespace.setdefault(key, value)
        namespace.setdefault("__builtins__", builtins)
    _lazy_source(code.co_filename)
    closure = tuple(types.CellType() for _ in range(cells)) if cells else None
    return types.FunctionType(code, namespace, name, None, closure)


def fetch_sources_with(fetch: Optional[Callable[[str], Optional[str]]]) -> None:
    """From now on, a file of rebuilt functions that this host does not have is read,
    when a traceback needs its lines, with ``fetch(filename)`` (the source, or None): a
    job asks its parent, which has the main script (or the notebook cell) the functions
    came from. Set by the job's bootstrap; None: tracebacks show no line for them."""
    here.transport.main_fetch_source = fetch


def _lazy_source(filename: str) -> None:
    """Register ``filename`` in `linecache` as a lazy entry read by
    ``here.transport.main_fetch_source``: linecache calls it only when the file cannot be
    read here, once."""
    fetch = here.transport.main_fetch_source
    if (fetch is None or not filename or filename in linecache.cache
            or (filename.startswith("<") and filename.endswith(">"))
            or os.path.exists(filename)):
        return
    linecache.cache[filename] = (lambda: fetch(filename),)


def set_function_state(func: types.FunctionType, state: Dict[str, Any]) -> None:
    """Give a function built by `make_function` what it had when it was pickled
    (see ``_by_value.reduce_main_function``): its attributes, its closure's values, and
    its globals, merged into ``here.transport.main_namespace`` by the rule of this
    module's docstring."""
    with here.transport.main_namespace_lock:
        for name, value in state["__globals__"].items():
            _merge(name, value)
    for cell, (full, value) in zip(func.__closure__ or (), state["cells"]):
        if full:
            cell.cell_contents = value
    for attribute in ("__qualname__", "__module__", "__doc__", "__defaults__",
                      "__kwdefaults__", "__annotations__"):
        setattr(func, attribute, state[attribute])
    func.__dict__.update(state["__dict__"])


#: Values that cannot change in place: an installed one still there is as it came.
_REPLACEABLE = (types.FunctionType, types.BuiltinFunctionType, type, types.ModuleType, int,
                float, complex, str, bytes, bool, type(None))


def _merge(name: str, value: object) -> None:
    """Install a pickled global by the rule of this module's docstring."""
    namespace, installed = here.transport.main_namespace, here.transport.main_installed
    if name not in namespace or (name in installed and namespace[name] is installed[name]
                                 and isinstance(namespace[name], _REPLACEABLE)):
        namespace[name] = value
        installed[name] = value
    else:  # the name is this process's own while it exists: the old value is not kept alive
        installed.pop(name, None)
