"""One globals namespace for the functions of the program's ``__main__`` rebuilt here.

A job never imports the user's main script: the functions defined there travel by value,
and a by-value function would get a globals dict of its own per pickle. A Pool's
initializer (pickled in the worker's launch payload) and its task function (pickled apart)
would not see each other's globals, so ``global model; model = v`` in the initializer would
be lost to the tasks. A ``multiprocessing`` worker imports the main script, and all its
functions share that module's globals; here they share `namespace`:

    the pickler, for a function whose globals are __main__'s (_by_value):
        (make_function, (code, base_globals, name, number of closure cells),
         state (its attributes, closure values and the globals it uses), set_function_state)
    any unpickler in any process:
        make_function       builds the function on `namespace`
        set_function_state  merges the globals it brings into `namespace` (rule below)

Merge rule: a pickled function brings the values its globals had when it was pickled. A
name absent here is installed. A name present is replaced only if it still holds the value
last installed from a pickle (``_installed``, so this process has not rebound it) and that
value cannot have been changed in place: a function, a class, a module or an immutable
scalar. So the initializer's ``model = "loaded"`` survives the tasks' ``model = None``, a
dict or list that an initializer or a task fills (``CACHE[key] = ...``) is never reset to
the parent's copy, as in a job that imported the main script once; a helper function
redefined in a notebook replaces the older one, and so does a number or string the parent
changed, unless this process rebound it.

``namespace`` is not ``sys.modules["__main__"].__dict__``: in a fiber job that module is
fiber's bootstrap, whose own globals the user's names must not overwrite. Classes of
``__main__`` need nothing more: cloudpickle rebuilds one class per definition, and their
methods are functions of ``__main__``, rebuilt here.
"""

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


def make_function(code: types.CodeType, base_globals: Dict[str, Any], name: str,
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


def _merge(name: str, value: Any) -> None:
    """Install a pickled global by the rule of this module's docstring."""
    if name not in namespace or (name in _installed and namespace[name] is _installed[name]
                                 and isinstance(namespace[name], _REPLACEABLE)):
        namespace[name] = value
        _installed[name] = value
    else:  # the name is this process's own while it exists: the old value is not kept alive
        _installed.pop(name, None)
