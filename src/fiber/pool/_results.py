"""Result objects of a pool: ``AsyncResult``, ``MapResult`` and the ``imap`` iterators.

Results arrive as frames (``deliver``, under the hub's lock); they are unpickled in the
thread that asks for them (``get``/``next``), or on the pool's callback thread when a
callback needs the value, so that the hub never runs user code.

A thread that waits for a result serves the hub's connections meanwhile
(``Server.wait_serving``): the worker's message wakes it directly, and the hub thread
sleeps on. Whatever completes a result on another thread nudges it.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Generic,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
)

from ..errors import TimeoutError
from ..transport.remote import unpack_exception
from ..transport.serialization import Frame, loads
from ..transport.server import Server

__all__ = ["AsyncResult", "ApplyResult", "MapResult", "IMapIterator", "IMapUnorderedIterator",
           "CallbackThread"]

Callback = Optional[Callable[[Any], Any]]
#: What a result holds: typed for the program's type checker, as typeshed types
#: multiprocessing's (``pool.map(f, xs)`` is a ``List`` of what ``f`` returns).
_T = TypeVar("_T")
#: Seconds a waiting thread may poll before it sleeps (``Server.wait_serving``).
Spin = Optional[Callable[[], float]]


def _value(ok: bool, frames: Sequence[Frame]) -> Tuple[bool, Any]:
    """Unpickle a delivered result: (True, value) or (False, exception to raise)."""
    try:
        obj = loads(frames)
    except Exception as e:  # e.g. a class the master cannot import (a Ctrl-C meanwhile
        return False, e  # is no outcome: it propagates, the frames kept for a next try)
    return (True, obj) if ok else (False, unpack_exception(obj))


class CallbackThread:
    """Runs result callbacks in order, off the hub thread (one per pool, started lazily).

    At interpreter exit (Python 3.12 and later refuse new threads once it has begun: a
    pool's first result may arrive then, as executors finish their pending work) the
    callbacks run in the delivering thread instead, one at a time.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[Optional[Callable[[], None]]] = queue.SimpleQueue()
        self._inline: Optional[threading.Lock] = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        try:
            self._thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            self._inline = threading.Lock()

    def is_current(self) -> bool:
        """Whether the calling thread runs this one's callbacks now."""
        return self._inline is not None or threading.current_thread() is self._thread

    def submit(self, fn: Callable[[], None]) -> None:
        if self._inline is None:
            self._queue.put(fn)
            return
        with self._inline:
            self._call(fn)

    def stop(self, wait: bool = True) -> None:
        if self._inline is not None:
            return
        self._queue.put(None)
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(30)

    def _run(self) -> None:
        while True:
            fn = self._queue.get()
            if fn is None:
                return
            self._call(fn)
            # not kept while the next one is awaited: a callback's closure (joblib's
            # Parallel, the pool's owner) must be freed once it ran, as multiprocessing does
            fn = None

    @staticmethod
    def _call(fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException:  # SystemExit too: the thread must outlive any callback
            import traceback

            traceback.print_exc()


class _Flag:
    """A one-shot event on a bare lock: cheaper to create, set and wait for than
    ``threading.Event``, which matters once per task."""

    __slots__ = ("_lock", "_set", "_server", "_spin")

    def __init__(self, server: Optional[Server] = None, spin: Spin = None) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()
        self._set = False
        self._server = server
        self._spin = spin

    def set(self) -> None:
        if not self._set:
            self._set = True
            self._lock.release()
            if self._server is not None:
                self._server.nudge()

    def wait_serving(self, timeout: Optional[float]) -> bool:
        """``wait``, serving the hub's connections meanwhile when this thread can."""
        if self._server is None:
            return self.wait(timeout)
        return self._server.wait_serving(self.is_set, timeout, self.wait, self._spin)

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: Optional[float] = None) -> bool:
        if self._set:
            return True
        if self._lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._lock.release()
        return self._set


class ApplyResult(Generic[_T]):
    """The result of ``apply_async``: ``get``, ``wait``, ``ready``, ``successful``."""

    #: The pool, kept from collection (which terminates it) while the result is held.
    _pool: Any = None

    def __init__(self, callbacks: Callable[[], CallbackThread], callback: Callback = None,
                 error_callback: Callback = None, server: Optional[Server] = None,
                 spin: Spin = None, owner: object = None) -> None:
        """``owner``: the pool, kept from collection while the result lives (as
        multiprocessing's results keep theirs)."""
        self._pool = owner
        self._event = _Flag(server, spin)
        self._callbacks = callbacks
        self._callback = callback
        self._error_callback = error_callback
        self._ok = False
        self._frames: Sequence[Frame] = []
        self._result: Optional[Tuple[bool, Any]] = None
        self._lock = threading.Lock()
        self._completed = False

    def deliver(self, index: int, ok: bool, frames: Sequence[Frame]) -> None:
        """Take in a task's outcome (``ok`` and its pickled ``frames``), from the pool's hub.

        The pool's internal API, not for users: the value is unpickled in the thread that
        asks for it; callbacks, if any, run before the result becomes ready.
        """
        if self._completed:
            return
        self._ok, self._frames = ok, frames
        self._complete()

    def _complete(self) -> None:
        """Ready: at once, or — as in multiprocessing — once its callback has run."""
        self._completed = True
        if self._callback is not None or self._error_callback is not None:
            self._callbacks().submit(self._run_callbacks)
        else:
            self._event.set()

    def _run_callbacks(self) -> None:
        try:
            ok, value = self._outcome()
            if ok and self._callback is not None:
                self._callback(value)
            elif not ok and self._error_callback is not None:
                self._error_callback(value)
        finally:
            self._event.set()

    def _outcome(self) -> Tuple[bool, Any]:
        with self._lock:
            if self._result is None:
                self._result = _value(self._ok, self._frames)
                self._frames = []
            return self._result

    def ready(self) -> bool:
        """Whether the call has completed (and its callback, if any, has run)."""
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait until the result is ready or ``timeout`` seconds pass (None: no limit).

        Returns None either way, as multiprocessing's: ``ready()`` tells which.
        """
        self._event.wait_serving(timeout)

    def successful(self) -> bool:
        """Whether the call completed without raising.

        Raises:
            ValueError: the result is not ready yet.
        """
        if not self.ready():
            raise ValueError(f"{self!r} not ready")
        return self._outcome()[0]

    def get(self, timeout: Optional[float] = None) -> _T:
        """The return value, or the remote exception re-raised with its traceback.

        Raises:
            fiber.TimeoutError (a multiprocessing.TimeoutError): not ready in time.
        """
        if not self._event.wait_serving(timeout):
            raise TimeoutError(f"result not ready within {timeout} s")
        ok, value = self._outcome()
        if ok:
            result: _T = value
            return result
        raise value


AsyncResult = ApplyResult


class MapResult(ApplyResult[List[_T]]):
    """The result of ``map_async``: chunks are put together in order.

    ``completed`` and ``total`` tell the progress (fiber extension): how many of the
    ``total`` items have their result here, counted as their chunks come.
    """

    def __init__(self, callbacks: Callable[[], CallbackThread], chunks: int, length: int,
                 callback: Callback = None, error_callback: Callback = None,
                 server: Optional[Server] = None, spin: Spin = None,
                 owner: object = None, chunksize: int = 0) -> None:
        super().__init__(callbacks, callback, error_callback, server, spin, owner)
        self._chunks: List[Any] = [None] * chunks
        self._missing = chunks
        self._length = length
        self._chunksize = chunksize or (-(-length // chunks) if chunks else 0)
        self._items_done = 0
        self._failed = False  # a chunk failed: its exception is the map's outcome
        if chunks == 0:
            # As multiprocessing's MapResult: an empty map is ready at once and its
            # callback is never called (get() still returns []).
            self._ok, self._result, self._completed = True, (True, []), True
            self._event.set()

    @property
    def completed(self) -> int:
        """Items whose result has come (of `total`)."""
        return self._items_done

    @property
    def total(self) -> int:
        """Items of the map."""
        return self._length

    def deliver(self, index: int, ok: bool, frames: Sequence[Frame]) -> None:
        """Take in chunk ``index``'s outcome, from the pool's hub (the pool's internal API).

        The map is ready once every chunk has come, as multiprocessing's: a failed
        one's exception (the first to come) is its outcome then, and the other chunks
        have all run (a program that catches it may count on their work being done).
        """
        if self._completed:
            return
        if ok:
            self._items_done += min(self._chunksize, self._length - index * self._chunksize)
            if not self._failed:  # (else not needed)
                self._chunks[index] = frames
        elif not self._failed:
            self._failed, self._frames, self._chunks = True, frames, []
        self._missing -= 1
        if self._missing == 0:
            self._ok = not self._failed
            self._complete()

    def _outcome(self) -> Tuple[bool, Any]:
        with self._lock:
            if self._result is None:
                if not self._ok:
                    self._result = _value(False, self._frames)
                else:
                    values: List[Any] = []
                    extend = values.extend
                    try:
                        for frames in self._chunks:  # (as `_value`, a call less a chunk:
                            extend(loads(frames))  # this runs once a map's result came)
                    except Exception as e:  # e.g. a class the master cannot import
                        self._result = (False, e)
                    else:
                        self._result = (True, values)
                self._chunks = []
            return self._result


class IMapIterator(Generic[_T]):
    """The iterator of ``imap``: results in order, the input consumed lazily.

    At most ``window()`` chunks are submitted and not yet consumed, so an endless input
    works; ``next`` tops the window up from the input before it waits. (A function: the
    window grows with what the pool's workers on slow links hold, see
    ``PoolCore.imap_window``.) An exception
    raised by the input is raised by ``next`` in its place, after the results of what
    the input gave before (as multiprocessing), and ends the iteration.
    """

    _ordered = True
    _pool: Any = None  # as ApplyResult._pool

    def __init__(self, submit: Callable[[int, Sequence[object]], None],
                 chunks: Iterator[Sequence[object]],
                 window: Callable[[], int], server: Optional[Server] = None,
                 spin: Spin = None,
                 owner: object = None) -> None:
        self._pool = owner  # as ApplyResult's
        self._submit = submit
        self._server = server
        self._spin = spin
        self._chunks = chunks
        self._window = window
        self._submitted = 0
        self._consumed = 0
        self._exhausted = False
        self._input_error: Optional[Exception] = None
        self._turn = threading.Lock()  # the thread taking the next result
        self._cond = threading.Condition()
        self._arrived: Dict[int, Tuple[bool, Sequence[Frame]]] = {}
        self._order: Deque[int] = collections.deque()
        self._buffer: Deque[_T] = collections.deque()
        self._feeding = threading.Lock()  # held while the input is read and submitted

    def top_up(self) -> None:
        """Submit the first window of the input (the pool, once a ``close()`` would
        drain this iterator: see `_draining`)."""
        self._top_up()

    @property
    def exhausted(self) -> bool:
        """Whether the input has been read to its end (or raised, or could not be
        submitted any more)."""
        return self._exhausted

    def drain(self) -> None:
        """Read the rest of the input and submit it (the pool's ``close()``: see
        `_draining`); a consumer meanwhile takes what comes and reads nothing."""
        self._top_up(drain=True)
        with self._cond:  # (a consumer waiting for the end of the input: it came)
            self._cond.notify_all()
        if self._server is not None:
            self._server.nudge()

    def _top_up(self, drain: bool = False) -> None:
        if not self._feeding.acquire(blocking=drain):
            return  # the pool's close() reads it to its end (`drain`)
        try:
            window = self._window()
            while not self._exhausted and (drain or self._submitted - self._consumed < window):
                try:
                    chunk = next(self._chunks)
                except StopIteration:
                    self._exhausted = True
                    return
                except Exception as e:
                    self._exhausted = True
                    self._input_error = e
                    return
                try:
                    self._submit(self._submitted, chunk)
                except Exception as e:  # the pool ended: what was submitted comes, then this
                    self._exhausted = True
                    self._input_error = e
                    return
                self._submitted += 1
        finally:
            self._feeding.release()

    def deliver(self, index: int, ok: bool, frames: Sequence[Frame]) -> None:
        """Take in chunk ``index``'s outcome, from the pool's hub (the pool's internal API);
        a thread waiting in ``next`` takes it.
        """
        with self._cond:
            self._arrived[index] = (ok, frames)
            if not self._ordered:
                self._order.append(index)
            self._cond.notify_all()
        if self._server is not None:
            self._server.nudge()

    def _wait(self, timeout: Optional[float]) -> bool:
        with self._cond:
            return self._cond.wait_for(self._available, timeout)

    def _take(self, timeout: Optional[float]
              ) -> Optional[Tuple[int, Tuple[bool, Sequence[Frame]]]]:
        """The next outcome and its index, kept until `_taken`; None if the input ended
        meanwhile with none to come."""
        ready = (self._wait(timeout) if self._server is None
                 else self._server.wait_serving(self._available, timeout, self._wait,
                                                self._spin))
        if not ready:
            raise TimeoutError(f"no result within {timeout} s")
        with self._cond:
            if self._ordered:
                got = self._arrived.get(self._consumed)
                return None if got is None else (self._consumed, got)
            return (self._order[0], self._arrived[self._order[0]]) if self._order else None

    def _taken(self, index: int) -> None:
        """The outcome of ``index`` was read (see `_take`)."""
        with self._cond:
            del self._arrived[index]
            if not self._ordered:
                self._order.popleft()
        self._consumed += 1

    def _available(self) -> bool:
        if self._ordered:
            if self._consumed in self._arrived:
                return True
        elif self._order:
            return True
        return self._exhausted and self._consumed == self._submitted

    def next(self, timeout: Optional[float] = None) -> _T:
        """The next result; one thread at a time (others wait their turn, within their
        ``timeout``), as two threads sharing an iterator would otherwise both wait for
        the last result and one of them for ever.

        Raises:
            StopIteration: every result has been returned.
            fiber.TimeoutError (a multiprocessing.TimeoutError): none came in ``timeout``.
            Exception: the exception a task raised, with its remote traceback as
                ``__cause__``, or the exception the input iterable raised.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._turn.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise TimeoutError(f"no result within {timeout} s")
        try:
            return self._next(deadline)
        finally:
            self._turn.release()

    def _next(self, deadline: Optional[float]) -> _T:
        while not self._buffer:
            self._top_up()
            if self._exhausted and self._consumed == self._submitted:
                error, self._input_error = self._input_error, None
                if error is not None:
                    raise error
                raise StopIteration
            got = self._take(
                None if deadline is None else max(0.0, deadline - time.monotonic()))
            if got is None:
                continue  # the input ended (drained by close()): nothing more comes
            index, (ok, frames) = got
            good, value = _value(ok, frames)  # (a Ctrl-C here: it is read again next)
            self._taken(index)
            if not good:
                raise value
            self._buffer.extend(value)
        return self._buffer.popleft()

    __next__ = next

    def __iter__(self) -> IMapIterator[_T]:
        return self


class IMapUnorderedIterator(IMapIterator[_T]):
    """The iterator of ``imap_unordered``: results as they complete."""

    _ordered = False
