"""One globals namespace for the functions of the program's ``__main__`` rebuilt here, so
that a Pool's initializer and its tasks see each other's globals, as in a
``multiprocessing`` worker that imported the main script. The merge rule:
docs/contributing/transport.md, "The main script's namespace"."""

from __future__ import annotations

import builtins
import linecache
import os
import threading
import types
from typing import Any, Callable, Dict, Optional

__all__ = ["namespace", "make_function", "set_function_state", "fetch_sources_with"]

#: Where the source of a rebuilt function's file comes from when this host lacks the
#: file: the process that sent it (see `fetch_sources_with`).
_fetch_source: Optional[Callable[[str], Optional[str]]] = None

#: The globals of every function of ``__main__`` rebuilt in this process.
namespace: Dict[str, Any] = {}

# name -> the value last installed from a pickle (a strong reference: an identity check on
# an id could be fooled once the value is gone and its id reused)
_installed: Dict[str, Any] = {}

# several threads may unpickle at once (the hub's, a pool worker's, the user's)
_lock = threading.Lock()


def make_function(code: types.CodeType, base_globals: Dict[str, object], name: str,
                  cells: int) -> types.FunctionType:
    """A function of ``__main__`` with `namespace` for its globals, and ``cells``
    empty closure cells (`set_function_state` fills them, and the rest).

    ``base_globals`` holds the module attributes that relative imports need (``__name__``,
    ``__file__``, ...); they are set once, by the first function of ``__main__`` rebuilt.
    """
    with _lock:
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
    global _fetch_source
    _fetch_source = fetch


def _lazy_source(filename: str) -> None:
    """Register ``filename`` in `linecache` as a lazy entry read by ``_fetch_source``:
    linecache calls it only when the file cannot be read here, once."""
    fetch = _fetch_source
    if (fetch is None or not filename or filename in linecache.cache
            or (filename.startswith("<") and filename.endswith(">"))
            or os.path.exists(filename)):
        return
    linecache.cache[filename] = (lambda: fetch(filename),)


def set_function_state(func: types.FunctionType, state: Dict[str, Any]) -> None:
    """Give a function built by `make_function` what it had when it was pickled
    (see ``_by_value.reduce_main_function``): its attributes, its closure's values, and
    its globals, merged into `namespace` by the rule of this module's docstring."""
    with _lock:
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
    if name not in namespace or (name in _installed and namespace[name] is _installed[name]
                                 and isinstance(namespace[name], _REPLACEABLE)):
        namespace[name] = value
        _installed[name] = value
    else:  # the name is this process's own while it exists: the old value is not kept alive
        _installed.pop(name, None)
