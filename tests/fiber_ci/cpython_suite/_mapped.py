"""CPython's ``test._test_multiprocessing`` with fiber in place of ``multiprocessing``: the
interpreter's own file, run in a module whose ``__import__`` answers its imports of
``multiprocessing`` with fiber. How, and its one limit: docs/contributing/testing.md,
"CPython's suite on fiber"."""

from __future__ import annotations

import builtins
import importlib
import multiprocessing
import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

# multiprocessing's submodules that fiber provides, and the private names of each that
# the suite's fixtures read from the standard library
_SUBMODULES: Dict[str, frozenset[str]] = {
    "connection": frozenset(),
    "managers": frozenset(),
    "pool": frozenset(),
    "queues": frozenset(),
    "sharedctypes": frozenset(),
    "process": frozenset({"_dangling", "_cleanup"}),
}
# the standard library's private modules, read by the fixtures (util) or by excluded tests
_PRIVATE = frozenset({
    "dummy", "heap", "util", "reduction", "resource_tracker", "resource_sharer",
    "shared_memory", "forkserver", "spawn", "popen_fork", "popen_spawn_posix",
    "popen_forkserver", "popen_spawn_win32", "synchronize",
})


class _AsFiber(types.ModuleType):
    """A fiber module seen under a ``multiprocessing`` name: fiber's attributes, and the
    standard library's for the ``private`` names only."""

    def __init__(self, name: str, fiber_module: types.ModuleType,
                 stdlib_module: types.ModuleType, private: frozenset[str],
                 submodules: Mapping[str, types.ModuleType]) -> None:
        super().__init__(name)
        self.__dict__.update(submodules)
        self._fiber_module = fiber_module
        self._stdlib_module = stdlib_module
        self._private = private

    def __reduce__(self) -> Tuple[Callable[[str], object], Tuple[str]]:
        # a test's target that cloudpickle sends by value (a classmethod's function) names
        # ``multiprocessing`` in its globals: the job gets its own substitute
        return (_substitute, (self.__name__,))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in self._private:
            return getattr(self._stdlib_module, name)
        return getattr(self._fiber_module, name)


_built: List[_AsFiber] = []


def _substitute(name: str) -> Any:
    """The substitute named ``name`` ("multiprocessing" or "multiprocessing.X"), one per
    process."""
    if not _built:
        _built.append(_build())
    module: Any = _built[0]
    for part in name.split(".")[1:]:
        module = getattr(module, part)
    return module


def _build() -> _AsFiber:
    import fiber

    subs: Dict[str, Any] = {
        name: _AsFiber(f"multiprocessing.{name}", importlib.import_module(f"fiber.{name}"),
                       importlib.import_module(f"multiprocessing.{name}"), private, {})
        for name, private in _SUBMODULES.items()
    }
    for name in _PRIVATE:
        try:
            subs[name] = importlib.import_module(f"multiprocessing.{name}")
        except ImportError:  # popen_spawn_win32 off Windows
            pass
    return _AsFiber("multiprocessing", fiber, multiprocessing, frozenset(), subs)


def _importer(top: Optional[_AsFiber]) -> Callable[..., object]:
    """``__import__`` for the suite's module: ``multiprocessing`` means ``top`` (the
    standard library itself when ``top`` is None)."""

    def _import(name: str, globals: Optional[Mapping[str, object]] = None,  # noqa: A002
                locals: Optional[Mapping[str, object]] = None,
                fromlist: Sequence[str] = (), level: int = 0) -> object:
        if top is None or level or name.split(".")[0] != "multiprocessing":
            return builtins.__import__(name, globals, locals, fromlist, level)
        if not fromlist:
            return top
        module: Any = top
        for part in name.split(".")[1:]:
            module = getattr(module, part)
        return module

    return _import


def load(namespace: Dict[str, Any], target: str) -> None:
    """Run the interpreter's ``test/_test_multiprocessing.py`` in ``namespace`` (a module's
    globals) with ``target`` ("fiber" or "stdlib") as ``multiprocessing``, and install its
    test classes there as ``test_multiprocessing_spawn`` does.

    Raises:
        ImportError: this Python has no ``test`` package (some distributions split it out:
            install it, e.g. Debian's ``libpython3.X-testsuite``).
    """
    try:
        import test._test_multiprocessing as original
    except ImportError as e:
        raise ImportError(
            f"CPython's multiprocessing test suite is not installed with this Python ({e}); "
            "it ships as the standard library's 'test' package") from e
    path = original.__file__
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    importer = _importer(_substitute("multiprocessing") if target == "fiber" else None)
    # run in a dict of its own (install_tests_in_module_dict iterates over its globals
    # while adding to the module's), named as the module, which gets its names
    suite: Dict[str, Any] = {"__name__": namespace["__name__"], "__file__": path,
                             "__builtins__": {**builtins.__dict__, "__import__": importer}}
    exec(code, suite)
    namespace.update({k: v for k, v in suite.items() if not k.startswith("__")})
    suite["install_tests_in_module_dict"](namespace, "spawn")
