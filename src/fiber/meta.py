"""``@fiber.meta``: the resources a job running a function asks its cluster for.

    @fiber.meta(cpu=4, memory=8192, gpu=1)
    def train(config): ...

    fiber.Process(target=train).start()    # a job with 4 CPUs, 8 GiB, 1 GPU

The decorator returns a thin callable wrapper that carries the resources; the user's
function object is not modified. ``Process.start`` reads them into the job's ``JobSpec``.
``memory`` is in megabytes.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple, TypeVar

from .backends import Resources

__all__ = ["meta", "resources_of", "Resources"]

F = TypeVar("F", bound=Callable[..., Any])


class MetaFunction:
    """A callable with job resources attached; behaves like the function it wraps."""

    def __init__(self, func: Callable[..., object], resources: Resources) -> None:
        functools.update_wrapper(self, func)
        self.__wrapped__ = func
        self.resources = resources

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<fiber.meta {self.resources} of {self.__wrapped__!r}>"

    def __reduce__(self) -> Tuple[Callable[..., object], Tuple[object, ...]]:
        # Importable functions pickle by reference, as the name now holds this wrapper.
        import sys

        module = sys.modules.get(getattr(self, "__module__", ""), None)
        qualname = getattr(self, "__qualname__", "")
        obj: Any = module
        for part in qualname.split("."):
            obj = getattr(obj, part, None)
        if obj is self and module is not None and module.__name__ != "__main__":
            return (_lookup, (module.__name__, qualname))
        return (MetaFunction, (self.__wrapped__, self.resources))


def _lookup(module: str, qualname: str) -> object:
    import importlib

    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def meta(cpu: Optional[float] = None, memory: Optional[int] = None,
         gpu: Optional[int] = None) -> Callable[[F], F]:
    """Attach job resources to a function: ``cpu`` cores, ``memory`` MB, ``gpu`` devices.

    Raises:
        TypeError, ValueError: a resource is not a positive number.
    """
    resources = Resources(cpu=cpu, memory_mb=memory, gpu=gpu)

    def decorate(func: F) -> F:
        if not callable(func):
            raise TypeError(f"fiber.meta decorates a callable, got {func!r}")
        inner = func.__wrapped__ if isinstance(func, MetaFunction) else func
        return MetaFunction(inner, resources)  # type: ignore[return-value]

    return decorate


def resources_of(target: object) -> Optional[Resources]:
    """The resources ``@meta`` attached to ``target``, or None."""
    return target.resources if isinstance(target, MetaFunction) else None
