"""joblib's parallel backend ``"fiber"``: ``joblib.Parallel``'s tasks, and so scikit-learn's
``n_jobs``, on the workers of a `fiber.Pool` of the configured fiber backend.

    Parallel(...)(tasks) ──configure──▶ FiberBackend ──▶ one fiber.Pool, kept across calls
    batch of tasks ──submit──▶ pool.apply_async ──▶ a pool worker (a job of the backend)
    its result or error ──the pool's callback thread──▶ joblib's callback
        ──▶ retrieve_result_callback (an error re-raised, its remote traceback as __cause__)

Importing this module registers the backend (``register()`` does it explicitly). A task's
arguments travel as fiber sends any task's (large numpy arrays as out-of-band buffers):
joblib's memory-mapping options (``max_nbytes``, ``mmap_mode``, ``temp_folder``) do not
apply, as a worker on another host could not read a local folder.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Dict, NamedTuple, Optional, Union

from ._version import install_hint

try:
    import joblib
    from joblib.parallel import AutoBatchingMixin, ParallelBackendBase
except ImportError as e:  # an extra: say how to install it
    raise ImportError(f"fiber.joblib needs joblib, which is not installed: "
                      f"{install_hint('joblib')}", name=e.name) from e

from .config import get_config
from .context import FiberContext, get_context
from .errors import BrokenPoolError
from .pool import Pool

__all__ = ["NAME", "POOL_ARGUMENTS", "FiberBackend", "register"]

#: The name under which the backend is registered: ``parallel_config(backend="fiber")``.
NAME = "fiber"

#: What ``parallel_config(backend="fiber", ...)`` may pass on to each worker's `fiber.Pool`.
POOL_ARGUMENTS = ("cpu", "memory", "gpu", "initializer", "initargs", "maxtasksperchild",
                  "error_handling")


class _Outcome(NamedTuple):
    """What a task's callback hands joblib: its value, or the error it failed with (kept
    apart, so that a task that returns an exception object is not taken as failed)."""

    value: Any
    error: Optional[BaseException]


class FiberBackend(AutoBatchingMixin, ParallelBackendBase):  # type: ignore[misc]
    """A joblib backend whose workers are those of one `fiber.Pool`.

    The pool is started by the first ``Parallel`` call and kept for the next ones (a
    pool's start costs a cluster job per worker): joblib makes one backend per
    ``parallel_config`` block (or per ``Parallel(backend="fiber")``), and the pool ends
    with it, when the block's backend is collected, or at the latest at the interpreter's
    exit. A call with another ``n_jobs`` resizes it; a pool that broke, or that
    ``abort_everything`` terminated, is replaced by a new one at the next call.

    Args:
        context: the fiber backend's name (``"slurm"``) or a context
            (`fiber.get_context`); None: the default context.
        pool_arguments: passed on to `fiber.Pool`: ``cpu``, ``memory`` (MB) and ``gpu``
            each worker's job asks for, ``initializer``, ``initargs``,
            ``maxtasksperchild``, ``error_handling``.

    Raises:
        TypeError: an argument that `fiber.Pool` does not take.
    """

    supports_retrieve_callback = True
    supports_sharedmem = False
    uses_threads = False
    # joblib's default n_jobs for this backend: -1, a pool of fiber.Pool's default size
    default_n_jobs = -1

    def __init__(self, nesting_level: Optional[int] = None,
                 inner_max_num_threads: Optional[int] = None,
                 context: Union[str, FiberContext, None] = None,
                 **pool_arguments: Any) -> None:
        unknown = sorted(set(pool_arguments) - set(POOL_ARGUMENTS))
        if unknown:
            raise TypeError(f"the joblib backend {NAME!r} got unexpected arguments "
                            f"{', '.join(unknown)}: it takes context and fiber.Pool's "
                            f"{', '.join(POOL_ARGUMENTS)}")
        super().__init__(nesting_level=nesting_level,
                         inner_max_num_threads=inner_max_num_threads)
        self._context = context
        self._pool_arguments: Dict[str, Any] = pool_arguments
        self._pool: Optional[Pool] = None
        self._size = 0  # the pool's number of workers
        self._broken = False

    def effective_n_jobs(self, n_jobs: Optional[int]) -> int:
        """The number of workers for ``n_jobs``: a negative one counts back from fiber's
        default pool size (``pool_processes`` of the config, else this host's CPUs), as
        joblib counts back from the CPUs: -1 is that size, -2 one less; None is -1, this
        backend's default.

        Raises:
            ValueError: ``n_jobs`` is 0.
        """
        if n_jobs == 0:
            raise ValueError("n_jobs == 0 in Parallel has no meaning: give a number of "
                             "workers, or -1 for fiber's default pool size")
        if n_jobs is None:
            n_jobs = self.default_n_jobs
        if n_jobs < 0:
            default = get_config().pool_processes or os.cpu_count() or 1
            return max(default + 1 + n_jobs, 1)
        return n_jobs

    def configure(self, n_jobs: Optional[int] = 1, parallel: Any = None,
                  prefer: Optional[str] = None, require: Optional[str] = None,
                  **memmapping_arguments: Any) -> int:
        """Make the pool ready for a ``Parallel`` call with ``n_jobs`` workers (started, or
        resized, or replaced if broken) and return that number. joblib's memory-mapping
        arguments are not used (see the module)."""
        size = self.effective_n_jobs(n_jobs)
        self.parallel = parallel
        if self._pool is not None and self._broken:
            self._discard_pool()
        if self._pool is None:
            self._pool = self._new_pool(size)
        elif self._size != size:
            self._pool.resize(size)
            self._size = size
        return size

    def _new_pool(self, size: int) -> Pool:
        self._broken, self._size = False, size
        context = self._context
        if isinstance(context, str):
            context = get_context(context)
        pool: Pool = (Pool(size, **self._pool_arguments) if context is None
                      else context.Pool(size, **self._pool_arguments))
        return pool

    def _discard_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.terminate()

    def submit(self, func: Callable[[], Any],
               callback: Optional[Callable[[Any], None]] = None) -> Any:
        """Run joblib's batch ``func`` on a pool worker; ``callback`` gets its value or error."""
        if self._pool is None:
            raise RuntimeError(f"the joblib backend {NAME!r} was not configured: "
                               "use it through joblib.Parallel or parallel_config")
        if callback is None:
            return self._pool.apply_async(func)
        done = callback
        try:
            return self._pool.apply_async(
                func, callback=lambda value: done(_Outcome(value, None)),
                error_callback=lambda error: done(_Outcome(None, error)))
        except BrokenPoolError:
            self._broken = True
            raise

    # joblib < 1.5 calls apply_async, later ones submit
    apply_async = submit

    def retrieve_result_callback(self, out: _Outcome) -> Any:
        """The task's value, or its error raised (the remote traceback as ``__cause__``).

        Raises:
            BaseException: the task's error; a `fiber.errors.BrokenPoolError` also marks
                the pool to be replaced at the next call.
        """
        if out.error is not None:
            if isinstance(out.error, BrokenPoolError):
                self._broken = True
            raise out.error
        return out.value

    def terminate(self) -> None:
        """The end of a ``Parallel`` call: the pool stays for the next one (see the
        class); the reference to the call is dropped, so that the backend, and with it the
        pool, can be collected with the ``parallel_config`` block that made it."""
        self.parallel = None
        self.reset_batch_stats()

    def abort_everything(self, ensure_ready: bool = True) -> None:
        """A task failed: terminate the pool, which cancels the tasks it holds, and start a
        new one if joblib goes on with this backend (``ensure_ready``), else at the next
        call."""
        self._discard_pool()
        if ensure_ready and self._size > 0:
            self._pool = self._new_pool(self._size)


def register() -> None:
    """Register the backend with joblib under `NAME` (again: the latest registration of a
    name is the one joblib uses); importing this module does it."""
    joblib.register_parallel_backend(NAME, FiberBackend)


register()
