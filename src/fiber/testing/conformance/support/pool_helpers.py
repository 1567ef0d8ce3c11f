"""Targets for pool workers (test_pool*.py); importable by the workers, which have fiber
installed where they run."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import threading
import time
import uuid
from typing import (
    TYPE_CHECKING,
    Callable,
    Dict,
    Iterator,
    NoReturn,
    Optional,
    Tuple,
    TypeVar,
    Union,
)

import fiber

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    import fiber.queues
    import fiber.synchronize

T = TypeVar("T")

# -- plain tasks -----------------------------------------------------------------------


def square(x: int) -> int:
    return x * x


def add(a: int, b: int) -> int:
    return a + b


def with_pid(x: T) -> Tuple[T, int]:
    return x, os.getpid()


_IMPORTED = uuid.uuid4().hex[:8]  # differs between containers that share a hostname and pids


def process_key() -> str:
    """This process, uniquely across hosts, pods and containers (each pod or container has its
    own pid namespace, so the same few pids; containers on host networking share a hostname).
    A process forked after this module was imported keeps the token but has its own pid."""
    return f"{socket.gethostname()}:{os.getpid()}:{_IMPORTED}"


def with_process_key(x: T) -> Tuple[T, str]:
    return x, process_key()


def sleep_then_pid(x: T, seconds: float = 0.01) -> Tuple[T, int]:
    time.sleep(seconds)
    return x, os.getpid()


def sleep_then_key(x: T, seconds: float = 0.01) -> Tuple[T, str]:
    time.sleep(seconds)
    return x, process_key()


def use_master_objects(x: int, queue: fiber.queues.Queue[int], lock: fiber.synchronize.Lock,
                       event: fiber.synchronize.Event) -> int:
    """Calls to objects served by the pool master's hub, the hub the worker takes its
    tasks from, while more tasks may be pushed to it."""
    with lock:
        value = queue.get(timeout=60)
    if not event.wait(timeout=60):
        raise RuntimeError("the event was not set")
    time.sleep(0.005)
    return value + x


def gated(x: T, gate: fiber.synchronize.Event,
          started: Optional[fiber.queues.Queue[T]] = None) -> T:
    """Say it started (on ``started``, a queue), then: ``"long"`` waits for ``gate``
    (an event), anything else sleeps 30 ms. Returns ``x``."""
    if started is not None:
        started.put(x)
    if x == "long":
        if not gate.wait(120):
            raise RuntimeError("the gate was never opened")
    else:
        time.sleep(0.03)
    return x


def count_then_fail(n: int) -> Iterator[int]:
    """An input that gives ``0..n-1``, then raises."""
    yield from range(n)
    raise KeyError("the input failed")


def sleep_return(x: T, seconds: float) -> T:
    time.sleep(seconds)
    return x


def fail_or_sleep(x: int, seconds: float) -> int:
    """Raise at once for ``x`` 0, else return ``x`` after ``seconds``."""
    if x == 0:
        raise ValueError(f"bad item {x}")
    time.sleep(seconds)
    return x


def sleep_until(x: T, deadline: float) -> T:
    """Return ``x`` at ``deadline`` (``time.time()``): tasks that end together."""
    time.sleep(max(0.0, deadline - time.time()))
    return x


def burn(seconds: float) -> bool:
    """Keep a CPU busy for ``seconds``."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return True


def pretend_spare_cpu(spare: bool) -> None:
    """A pool initializer: this worker sees the host with (or without) a CPU to spare."""
    import fiber.transport.cpus

    fiber.transport.cpus.spare_cpu = lambda: spare


def process_cpu() -> float:
    return time.process_time()


def polled_seconds() -> float:
    """The wall time this worker has spent polling (fiber.transport.cpus)."""
    import fiber.transport.cpus

    return fiber.transport.cpus.polled_seconds()


def getpid() -> int:
    return os.getpid()


def raise_value_error(message: str) -> None:
    raise ValueError(message)


def fail_on(x: int, bad: int = 5) -> int:
    if x == bad:
        raise ValueError(f"bad item {x}")
    return x * 10


def fail_on_5(x: int) -> int:
    return fail_on(x, 5)


def negate(a: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return -a


def kwargs_echo(*args: object, **kwargs: object) -> Tuple[Tuple[object, ...], Dict[str, object]]:
    return args, kwargs


def tiny(x: int) -> int:
    """The chaos tests' task: about a millisecond, a value computed from the input."""
    time.sleep(0.001)
    return x * 3 + 1


# -- initializers ------------------------------------------------------------------------

STATE: Optional[Tuple[object, ...]] = None


def set_state(*values: object) -> None:
    global STATE
    STATE = values


def get_state(_: object = None) -> Tuple[Optional[Tuple[object, ...]], str]:
    return STATE, process_key()


def init_raises(message: str) -> None:
    raise RuntimeError(message)


def slow_start(seconds: float, names: Tuple[str, ...]) -> None:
    """Initializer: the workers named in ``names`` take ``seconds`` to start."""
    if fiber.current_process().name in names:
        time.sleep(seconds)


# -- callables with state (a pool must use their state at the time of the call) ---------


class Scale:
    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, x: int) -> int:
        return x * self.k

    def times(self, x: int) -> int:
        return x * self.k


@dataclasses.dataclass
class ScaleRecord:  # eq=True without frozen: unhashable, like many config objects
    k: int

    def __call__(self, x: int) -> int:
        return x * self.k


# -- the crash matrix ----------------------------------------------------------------------
#
# A fault is one of "exception", "exit" (os._exit(3)), "sigkill" (the worker kills itself)
# or "unpicklable" (a value that cannot be pickled where it must be); each happens only at
# its stage, and only inside a pool worker, never in the test process.

EXIT_CODE = 3


class UnpicklableError(Exception):
    """An exception that cannot travel back to the master (it holds a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def in_worker() -> bool:
    return fiber.current_process().name != "MainProcess"


def do_fault(kind: str, where: str) -> None:
    """Commit fault ``kind`` at stage ``where`` (when in a worker)."""
    if not in_worker():
        return None
    if kind == "exception":
        raise ValueError(f"fault:{where}")
    if kind == "exit":
        os._exit(EXIT_CODE)
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    if kind == "unpicklable":
        raise UnpicklableError(f"fault:{where}")
    raise AssertionError(f"unknown fault {kind!r}")


class RefusesPickling:
    """Master side: cannot be pickled (its ``__reduce__`` raises)."""

    def __reduce__(self) -> NoReturn:
        raise ValueError("fault:pickling the task")


def _rebuild_fault(kind: str) -> str:
    do_fault(kind, "unpickling the task")
    return kind


class UnpickleFault:
    """Pickles fine; rebuilding it inside a worker commits the fault."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __reduce__(self) -> Tuple[Callable[[str], str], Tuple[str]]:
        return _rebuild_fault, (self.kind,)


@dataclasses.dataclass
class RunFault:
    """Commits the fault when the task runs (see :func:`crash_target`)."""

    kind: str


@dataclasses.dataclass
class ResultFault:
    """The task returns a value that commits the fault when the worker pickles it."""

    kind: str


def _never_rebuilt(kind: str) -> str:
    return kind


class ResultBomb:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __reduce__(self) -> Tuple[Callable[[str], str], Tuple[str]]:
        do_fault(self.kind, "pickling the result")
        return _never_rebuilt, (self.kind,)


def crash_target(x: Union[int, RunFault, ResultFault]) -> object:
    if isinstance(x, RunFault):
        return do_fault(x.kind, "running the task")
    if isinstance(x, ResultFault):
        if x.kind == "unpicklable":
            return threading.Lock()
        return ResultBomb(x.kind)
    return x * 10
