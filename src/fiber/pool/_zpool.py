"""``ZPool`` and ``ResilientZPool``: the original fiber's names of its pools.

The original fiber had two pools with the API of ``multiprocessing.Pool``: ``ZPool``, and
``ResilientZPool`` (its ``fiber.pool.Pool``), which gave a dead worker's tasks to the other
workers. This package has one pool, which always does; both names are that pool, with the
original's signature (``cluster``, which it never used, must stay None).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ._pool import Pool

__all__ = ["ZPool", "ResilientZPool"]


class ZPool(Pool):
    """`fiber.pool.Pool` under the original fiber's name and signature: it raises what
    ``Pool`` raises, and:

    Raises:
        NotImplementedError: ``cluster`` is given (the original never used it either).
    """

    def __init__(self, processes: Optional[int] = None,
                 initializer: Optional[Callable[..., Any]] = None,
                 initargs: Iterable[Any] = (), maxtasksperchild: Optional[int] = None,
                 cluster: Any = None, **kwargs: Any) -> None:
        if cluster is not None:
            raise NotImplementedError(
                "Pool(cluster=...) of the original fiber is not supported: choose the "
                "backend with fiber.get_context(name).Pool(...) or the 'backend' setting")
        super().__init__(processes, initializer, initargs, maxtasksperchild, **kwargs)


class ResilientZPool(ZPool):
    """`ZPool` with ``error_handling=True`` (the original's pool with error handling): a
    task that raised runs again (see `fiber.pool.Pool`)."""

    def __init__(self, processes: Optional[int] = None,
                 initializer: Optional[Callable[..., Any]] = None,
                 initargs: Iterable[Any] = (), maxtasksperchild: Optional[int] = None,
                 cluster: Any = None, **kwargs: Any) -> None:
        kwargs.setdefault("error_handling", True)
        super().__init__(processes, initializer, initargs, maxtasksperchild, cluster, **kwargs)
