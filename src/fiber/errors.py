"""Every exception fiber raises on purpose.

Public errors also subclass what users of ``multiprocessing`` already catch, so that
``except multiprocessing.ProcessError`` keeps working after ``import fiber as
multiprocessing``. Third-party exceptions (sockets, subprocess, cluster clients) are wrapped
here at the layer boundary and never leak out of fiber's public API.
"""

from __future__ import annotations

import difflib
import multiprocessing
import multiprocessing.managers as _mp_managers
import multiprocessing.pool as _mp_pool
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Dict, Optional, Sequence, Tuple, Type

from ._process_state import here

__all__ = [
    "FiberError",
    "ConfigError",
    "BackendError",
    "UnknownBackendError",
    "SubmitError",
    "TransportError",
    "AuthenticationError",
    "ProcessError",
    "ProcessStateError",
    "ResourceLimitError",
    "TimeoutError",
    "LockLostError",
    "RemoteError",
    "RemoteTraceback",
    "as_remote_error",
    "MaybeEncodingError",
    "WorkerLostError",
    "BrokenPoolError",
    "PoolTerminatedError",
    "RingError",
]


class FiberError(Exception):
    """Root of every error fiber raises on purpose."""


class ConfigError(FiberError, ValueError):
    """A configuration key is unknown or its value is wrong; ``where`` names the source
    that set it (``FIBER_DEBUG``, a ``.fiberconfig`` path, ``fiber.init``), if known."""

    def __init__(self, key: str, problem: str, valid: Sequence[str] = (),
                 where: str = "") -> None:
        self.key = key
        self.where = where
        self._given = (problem, tuple(valid))
        msg = f"fiber config {key!r}" + (f" (from {where})" if where else "") + f": {problem}"
        if valid:
            msg += "; valid keys are: " + ", ".join(sorted(valid))
        super().__init__(msg)

    def __reduce__(self) -> Tuple[type, Tuple[object, ...]]:
        # its arguments are not its message: pickle them
        return (type(self), (self.key, *self._given, self.where))


class BackendError(FiberError):
    """A backend could not do what was asked (submit, query or cancel jobs)."""


class UnknownBackendError(BackendError, ValueError):
    """No backend is registered under the requested name."""

    def __init__(self, name: str, known: Sequence[str], hint: str = "") -> None:
        self.name = name
        close = difflib.get_close_matches(str(name), list(known), n=1, cutoff=0.6)
        super().__init__(
            f"unknown fiber backend {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; known backends: {', '.join(sorted(known))}"
            + (f" ({hint})" if hint else "")
        )


class SubmitError(BackendError):
    """A cluster command failed; carries the command and what it printed."""

    def __init__(
        self,
        message: str,
        command: Optional[Sequence[str]] = None,
        returncode: Optional[int] = None,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        self.command = list(command) if command else None
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        parts = [message]
        if command:
            parts.append(f"command: {' '.join(self.command or [])}")
        if returncode is not None:
            parts.append(f"exit code: {returncode}")
        if stdout.strip():
            parts.append(f"stdout: {stdout.strip()}")
        if stderr.strip():
            parts.append(f"stderr: {stderr.strip()}")
        super().__init__("\n".join(parts))


class TransportError(FiberError, ConnectionError):
    """A fiber connection failed; carries the address it was talking to."""

    def __init__(self, message: str, address: str = "") -> None:
        self.address = address
        super().__init__(f"{message} ({address})" if address else message)


class AuthenticationError(FiberError, multiprocessing.AuthenticationError):
    """A peer could not prove it holds the program's secret."""


class ProcessError(FiberError, multiprocessing.ProcessError):
    """A fiber process could not be started or managed."""


class ProcessStateError(ProcessError, AssertionError):
    """A process object used in a state multiprocessing asserts against (started twice,
    joined before it started, or by a process other than its parent).

    multiprocessing raises a bare ``AssertionError`` there, which programs catch; this is
    also one, and a `ProcessError` as every process error of fiber's. (It is raised
    explicitly, so it holds under ``python -O`` too, where the stdlib's asserts vanish.)
    """


class ResourceLimitError(ProcessError):
    """Starting the jobs asked for would exceed a limit of this process (open files)."""


class TimeoutError(FiberError, multiprocessing.TimeoutError):
    """A blocking fiber call ran past its deadline."""


class LockLostError(FiberError, RuntimeError):
    """A fiber ``Lock`` or ``RLock`` was taken from the thread that held it: the lock's
    hub counted that thread's process lost (its connection reset and it did not
    connect again within 15 s, or its host was silent for ``heartbeat_timeout``) and
    gave the lock to the next waiter. Raised by that thread's next ``release`` (or
    ``acquire``, or ``Condition.wait``) of the lock, in place of releasing it for
    whoever holds it since: two holders at once are an error the program sees, not a
    silent one (fencing, as a lock service's session expiry)."""


class RemoteTraceback(_mp_pool.RemoteTraceback):  # type: ignore[name-defined,misc]
    """The formatted traceback of an exception raised in another fiber process.

    Attached as ``__cause__`` of the re-raised exception so that the caller sees both
    its own stack and the remote one, like ``concurrent.futures`` does. A subclass of
    ``multiprocessing.pool.RemoteTraceback``: code that looks for that one finds it.
    """

    def __init__(self, tb: str) -> None:
        self.tb = tb
        Exception.__init__(self, tb)  # args=(tb,): it pickles (the stdlib's keeps none)

    def __str__(self) -> str:
        return f'\n"""\n{self.tb}"""'


#: A pool task's result that could not be pickled in the worker, raised by ``get()``: the
#: standard library's own class (``exc`` and ``value`` are the reprs of the pickling
#: error and of the result), so ``except multiprocessing.pool.MaybeEncodingError`` works.
MaybeEncodingError: type = _mp_pool.MaybeEncodingError  # type: ignore[attr-defined]


class RemoteError(FiberError, _mp_managers.RemoteError):
    """A remote exception that could not be sent back as itself (e.g. unpicklable), or
    one that ``multiprocessing``'s manager reports as ``RemoteError`` (`as_remote_error`).

    A subclass of ``multiprocessing.managers.RemoteError``: code that catches that one
    catches this one. ``type_name`` is the remote exception's type, ``remote_traceback``
    its formatted traceback (also the ``__cause__`` of the raised exception).
    """

    def __init__(self, type_name: str, message: str, tb: str = "") -> None:
        self.type_name = type_name
        self.remote_traceback = tb
        self._message = message
        super().__init__(f"{type_name}: {message}")

    def __str__(self) -> str:  # the message, not the standard library's framed traceback
        return Exception.__str__(self)

    def __reduce__(self) -> Tuple[type, Tuple[str, str, str]]:
        # its arguments are not its message: pickle them
        return (RemoteError, (self.type_name, self._message, self.remote_traceback))


_OWN = ("type_name", "remote_traceback")


def as_remote_error(exc: BaseException) -> BaseException:
    """``exc`` as an error that is both a `RemoteError` and of ``exc``'s own type.

    For the errors ``multiprocessing``'s manager reports as ``RemoteError`` (a call of a
    method that is not exposed, an object whose creation fails): ``except RemoteError``
    catches it, as with ``multiprocessing``, and ``except AttributeError`` (or the error's
    own type) too, as fiber re-raises a remote error as itself. Its class is named
    ``Remote<Type>`` and shows ``exc``'s message. ``exc`` itself is returned when it is a
    `RemoteError` already, not an ``Exception``, or of a type that cannot be extended.
    """
    cls = type(exc)
    if isinstance(exc, RemoteError) or not isinstance(exc, Exception):
        return exc
    try:
        remote = here.api.remote_classes.get(cls) or _remote_class(cls)
        err: RemoteError = remote.__new__(remote, *exc.args)
    except Exception:
        return exc
    try:  # what the type's __init__ makes of its arguments (OSError's errno...)
        cls.__init__(err, *exc.args)
    except Exception:
        pass
    err.__dict__.update(vars(exc))
    err.args = exc.args
    err.type_name, err.remote_traceback = cls.__qualname__, ""
    return err.with_traceback(exc.__traceback__)


def _remote_class(cls: type) -> type:
    def __reduce__(self: RemoteError  # noqa: N807 - a method, defined for the class
                   ) -> Tuple[Callable[..., BaseException],
                              Tuple[type, Tuple[object, ...], Dict[str, object], str]]:
        state = {k: v for k, v in vars(self).items() if k not in _OWN}
        return (_rebuild_remote_error, (here.api.remote_bases[type(self)], self.args, state,
                                        self.remote_traceback))

    remote = type(f"Remote{cls.__name__}", (RemoteError, cls), {
        "__module__": __name__, "__doc__": f"A `RemoteError` that is a {cls.__name__}.",
        "__str__": cls.__str__, "__reduce__": __reduce__})
    here.api.remote_classes[cls], here.api.remote_bases[remote] = remote, cls
    return remote


def _rebuild_remote_error(cls: Type[BaseException], args: Tuple[object, ...],
                          state: Dict[str, object], tb: str) -> BaseException:
    original = cls.__new__(cls, *args)
    original.args = args
    original.__dict__.update(state)
    err = as_remote_error(original)
    if isinstance(err, RemoteError):
        err.remote_traceback = tb
    return err


class WorkerLostError(ProcessError, BrokenProcessPool):
    """A task killed its worker more times than allowed; names each attempt's exit.

    Also a ``concurrent.futures.process.BrokenProcessPool``, what a
    ``ProcessPoolExecutor``'s future raises when its worker dies: ``except
    BrokenProcessPool`` catches it after a move to ``fiber.futures.Executor``. Unlike the
    stdlib's, the pool is not broken by it: other tasks go on, and it takes new ones."""


class BrokenPoolError(ProcessError, BrokenProcessPool):
    """The pool cannot run tasks: its workers keep failing to start, or the backend
    refuses to create them. Carries the reason (an initializer's traceback, the backend's
    error)."""


class PoolTerminatedError(ProcessError):
    """The pool was terminated before this task finished."""


class RingError(ProcessError):
    """A member of a `fiber.Ring` failed, so the ring ended all of its members.

    Attributes: ``rank`` (the failed member's rank), ``size``, ``exitcode`` (its exit code,
    negative for a signal; None if the member raised, or if the backend never said),
    ``traceback`` (the member's formatted traceback when it raised, else ""), ``host``
    (the address the member was reached at, "" if it never said), ``restarts`` (how
    often the ring had been re-formed before this failure) and ``others`` (ranks that
    failed right after it, most likely because of it: peers of a collective). When the
    member raised, its exception is ``__cause__`` (and the remote traceback that
    exception's ``__cause__``).
    """

    def __init__(self, rank: int, size: int, what: str, *, exitcode: Optional[int] = None,
                 traceback: str = "", host: str = "", restarts: int = 0,
                 others: Sequence[int] = ()) -> None:
        self.rank = rank
        self.size = size
        self.exitcode = exitcode
        self.traceback = traceback
        self.host = host
        self.restarts = restarts
        self.others = list(others)
        self._what = what
        where = f" on {host}" if host else ""
        after = f" (after {restarts} restarts)" if restarts else ""
        also = (f" (then rank{'s' if len(others) > 1 else ''} "
                f"{', '.join(map(str, others))} failed too)" if others else "")
        super().__init__(f"ring member rank {rank} of {size}{where} {what}{after}{also}; "
                         f"the ring ended its other members")

    def __reduce__(self) -> Tuple[Callable[..., RingError], Tuple[object, ...]]:
        # its arguments are not its message: pickle them
        return (_ring_error, (self.rank, self.size, self._what, self.exitcode, self.traceback,
                              self.host, self.restarts, self.others))


def _ring_error(rank: int, size: int, what: str, exitcode: Optional[int], tb: str, host: str,
                restarts: int, others: Sequence[int]) -> RingError:
    return RingError(rank, size, what, exitcode=exitcode, traceback=tb, host=host,
                     restarts=restarts, others=others)
