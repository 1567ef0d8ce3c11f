"""What fiber sends by value itself, not through cloudpickle's private reducers: code
objects (their file names kept) and the functions of ``__main__``, exactly as the parent
had them, whatever cloudpickle version is installed. The design:
docs/contributing/transport.md, "What goes by value"."""

from __future__ import annotations

import dis
import marshal
import sys
import types
from typing import Callable, Dict, Iterator, List, Tuple

from .._process_state import here
from ._main_namespace import make_function, set_function_state

__all__ = ["reduce_code", "reduce_main_function", "is_main_function"]

_GLOBAL_OPS = frozenset({"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL"})
#: The module attributes a rebuilt function's globals need (relative imports, __file__).
_BASE_GLOBALS = ("__package__", "__name__", "__path__", "__file__")


def reduce_code(code: types.CodeType) -> object:
    """A code object as ``marshal.loads(bytes)``, its ``co_filename`` kept; NotImplemented
    (the pickler's own way) for one marshal refuses (a constant put in by hand)."""
    try:
        return marshal.loads, (marshal.dumps(code),)
    except ValueError:
        return NotImplemented


def is_main_function(obj: object) -> bool:
    """A plain function whose globals are the main script's (or a notebook's)."""
    return type(obj) is types.FunctionType and obj.__globals__.get("__name__") == "__main__"


def reduce_main_function(func: types.FunctionType) -> Tuple[
        Callable[..., types.FunctionType], Tuple[types.CodeType, Dict[str, object], str, int],
        Dict[str, object], None, None, Callable[..., None]]:
    """The reduction of a function of ``__main__``: built empty by ``make_function``, then
    given its state by ``set_function_state`` (so a function that refers to itself, in
    its globals or its closure, pickles: the memo holds it before its state is saved)."""
    g = func.__globals__
    code = func.__code__
    closure = func.__closure__ or ()
    used = {name: g[name] for name in _global_names(code) if name in g}
    cells = []
    for cell in closure:
        try:
            cells.append((True, cell.cell_contents))
        except ValueError:  # an empty cell (a variable not assigned yet)
            cells.append((False, None))
    state: Dict[str, object] = {
        "__name__": func.__name__, "__qualname__": func.__qualname__,
        "__module__": func.__module__, "__doc__": func.__doc__,
        "__defaults__": func.__defaults__, "__kwdefaults__": func.__kwdefaults__,
        "__annotations__": func.__annotations__, "__dict__": dict(func.__dict__),
        "__globals__": used, "cells": cells,
        # submodules the function reaches as attributes (``os.path.join`` with ``os`` a
        # global): unpickling them imports them where the job has not yet
        "submodules": _submodules(code, [*used.values(), *(v for _, v in cells)]),
    }
    base = {k: g[k] for k in _BASE_GLOBALS if k in g}
    return (make_function, (code, base, func.__name__, len(closure)), state, None, None,
            set_function_state)


def _global_names(code: types.CodeType) -> Tuple[str, ...]:
    """The global names the code (and the code of the functions it defines) reads or
    writes: the instructions', not ``co_names`` (which holds attribute names too: a
    method's ``self.model`` must not ship a global ``model``)."""
    cache = here.transport.code_global_names
    names = cache.get(code)
    if names is None:
        found: Dict[str, None] = {}  # ordered: the same pickle for the same function
        for inner in _code_tree(code):
            for ins in dis.get_instructions(inner):
                if ins.opname in _GLOBAL_OPS:
                    found[ins.argval] = None
        names = cache[code] = tuple(found)
    return names


def _code_tree(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_tree(const)


def _submodules(code: types.CodeType, values: List[object]) -> List[types.ModuleType]:
    """The imported submodules of the modules among ``values`` whose dotted path the code
    spells out (``xml.etree`` for ``xml.etree.ElementTree.parse``)."""
    words = {name for inner in _code_tree(code) for name in inner.co_names}
    found = []
    for value in values:
        if not isinstance(value, types.ModuleType):
            continue
        prefix = value.__name__ + "."
        for name, module in list(sys.modules.items()):
            if (module is not None and name.startswith(prefix)
                    and set(name[len(prefix):].split(".")) <= words):
                found.append(module)
    return found
