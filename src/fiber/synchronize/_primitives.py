"""Locks and semaphores shared by processes on any hosts, served by the hub of the process
that created them; a ``Lock`` or ``RLock`` whose holder dies is released. The design:
docs/contributing/transport.md, "Locks and semaphores"."""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
from multiprocessing.context import BaseContext
from typing import Any, Callable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .._core._parking import ABANDON, Made, Owner, Parking, Q
from .._core._parking import tid as _tid
from .._core._served import Count, Handle, Wait, decode_wait, encode_wait
from .._process_state import here
from ..errors import LockLostError
from ..process import current_process
from ..transport.operations import handles, reply_of
from ..transport.receipts import REANCHOR_WAIT_S, TICKET_BYTES
from ..transport.serialization import Frame, loads
from ..transport.server import Peer, Server

__all__ = ["Lock", "ManagedLock", "RLock", "Semaphore", "BoundedSemaphore",
           "LockService", "ThreadingLockService", "LockOps", "SemaphoreOps"]

# -- Lock and RLock --------------------------------------------------------------------


class LockOps:
    """The lock protocol's operations; each request starts with the caller's thread id."""

    ABANDON = ABANDON  # (every parking service's: see fiber._core._parking)
    ACQUIRE = b"acquire"
    ACQUIRE_RESTORE = b"acquire_restore"
    RELEASE = b"release"
    RELEASE_SAVE = b"release_save"
    OWNED = b"owned"
    STATE = b"state"


class SemaphoreOps:
    """The semaphore protocol's operations."""

    ABANDON = ABANDON  # (every parking service's: see fiber._core._parking)
    ACQUIRE = b"acquire"
    RELEASE = b"release"
    VALUE = b"value"


class Caller(NamedTuple):
    """``release``, ``release_save``, ``owned``: the calling thread (of the process whose
    connection it comes on)."""

    tid: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Caller:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return Caller.pack(self.tid)

    @staticmethod
    def pack(tid: bytes) -> List[Frame]:
        """The frames of ``Caller(tid)``, without making the record: a lock's every
        release sends them, and the record's making measured 6% of a lock's round trip
        in the process that waits for it."""
        return [tid]


class Acquire(NamedTuple):
    """``acquire``: the calling thread, and how long the lock may keep it waiting."""

    tid: bytes
    wait: Optional[float]  # as `Wait`'s seconds

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Acquire:
        return cls(bytes(payload[0]), decode_wait(payload[1]))

    def frames(self) -> List[Frame]:
        return Acquire.pack(self.tid, True, self.wait)

    @staticmethod
    def pack(tid: bytes, block: bool, timeout: Optional[float]) -> List[Frame]:
        """The frames of the acquire a call with ``block`` and ``timeout`` makes, without
        making the record (as `Caller.pack`: every acquire sends them)."""
        return [tid, encode_wait(block, timeout)]


class AcquireRestore(NamedTuple):
    """``acquire_restore`` (``Condition.wait`` takes the lock back): the calling thread
    and the recursion count it held the lock with."""

    tid: bytes
    recursion: int

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> AcquireRestore:
        return cls(bytes(payload[0]), Q.unpack(payload[1])[0])

    def frames(self) -> List[Frame]:
        return [self.tid, Q.pack(self.recursion)]


def _who(peer: Peer, tid: bytes) -> Owner:
    """The (process, thread) a lock request comes from."""
    return (peer.process_id, tid)


#: Holders freed as lost each lock remembers (the oldest forgotten).
_REMEMBERED = 64
_TAKEN = ("the lock was taken from this thread: its hub counted this process lost while "
          "it held the lock (its connection was reset and it did not connect again "
          f"within {REANCHOR_WAIT_S:g} s, or its host was silent for heartbeat_timeout), "
          "and another process may have held it since")


class LockService(Parking):
    """One lock: its owner, recursion count and waiters (``data`` = (owner, count))."""

    protocol = "lock"

    def __init__(self, recursive: bool) -> None:
        super().__init__()
        self.recursive = recursive
        self.owner: Optional[Owner] = None
        self.count = 0
        #: The request that gave the owner the lock (its ticket, when it has one).
        self.granted = b""
        #: Holders whose process was counted gone while they held the lock, which was
        #: freed (their grant's request): if the process lives after all (a reset it
        #: took too long to come back from, a host silent past the grace), its next
        #: release or acquire raises `LockLostError` instead of acting on the lock that
        #: is now another's.
        self.taken: collections.OrderedDict[Owner, bytes] = collections.OrderedDict()
        #: Each caller's last release (see `Made`).
        self.released = Made()
        #: Calls that need the lock free or held by their caller (a Value's accesses).
        self.guarded: List[Tuple[Owner, Callable[[], None]]] = []

    @handles(LockOps.ACQUIRE, Acquire)
    def acquire(self, server: Server, peer: Peer, req_id: bytes, msg: Acquire) -> None:
        self._acquire(server, peer, req_id, _who(peer, msg.tid), msg.wait, 1, recursion=True)

    @handles(LockOps.ACQUIRE_RESTORE, AcquireRestore)
    def acquire_restore(self, server: Server, peer: Peer, req_id: bytes,
                        msg: AcquireRestore) -> None:
        """``Condition.wait`` takes the lock back with its count."""
        self._acquire(server, peer, req_id, _who(peer, msg.tid), None, msg.recursion,
                      recursion=False)

    def _acquire(self, server: Server, peer: Peer, req_id: bytes, who: Owner,
                 wait: Optional[float], count: int, recursion: bool) -> None:
        taken = self.taken.pop(who, None)
        if taken is not None and taken != req_id:  # (its grant asked again: served anew)
            raise LockLostError(_TAKEN)
        if len(req_id) == TICKET_BYTES and self.owner == who and req_id == self.granted:
            # its grant asked again, whose answer its connection's end lost (one that
            # timed out, whose answers are not kept): it has the lock, not a wait behind it
            server.reply(peer, req_id, b"ok")
        elif self.owner is None:
            self.owner, self.count, self.granted = who, count, req_id
            server.reply(peer, req_id, b"ok")
        elif self.recursive and self.owner == who and recursion:
            self.count += 1
            server.reply(peer, req_id, b"ok")
        elif wait == 0:
            server.reply(peer, req_id, b"no")
        else:
            self.park(server, peer, req_id, wait, (who, count))

    @handles(LockOps.RELEASE, Caller)
    def release(self, server: Server, peer: Peer, req_id: bytes, msg: Caller) -> None:
        """Answered only when sent as a request."""
        who = _who(peer, msg.tid)
        if self.released.again(req_id):
            server.reply(peer, req_id, b"ok")  # made already: its answer was lost
            return
        self._check_not_taken(who)
        if self.recursive and self.owner != who:
            raise AssertionError("attempt to release recursive lock not owned by thread")
        if self.owner is None:
            raise self.unlocked_error()
        self.count -= 1
        if self.count <= 0:
            self._free(server)
        self.released.made(req_id)
        if req_id:
            server.reply(peer, req_id, b"ok")

    def _check_not_taken(self, who: Owner) -> None:
        """Raise `LockLostError` if ``who`` held the lock until its process was counted
        gone (and does not hold it again)."""
        if self.owner != who and self.taken.pop(who, None) is not None:
            raise LockLostError(_TAKEN)

    @handles(LockOps.RELEASE_SAVE, Caller)
    def release_save(self, server: Server, peer: Peer, req_id: bytes, msg: Caller) -> None:
        """``Condition.wait``: let go entirely, answered with the count to restore."""
        who = _who(peer, msg.tid)
        self._check_not_taken(who)
        if self.owner != who:
            raise AssertionError("must acquire() condition before using wait()")
        count = self.count
        self._free(server)
        server.reply(peer, req_id, b"ok", Count(count).frames())

    @handles(LockOps.OWNED, Caller)
    def owned(self, server: Server, peer: Peer, req_id: bytes, msg: Caller) -> None:
        server.reply(peer, req_id, b"ok" if self.owner == _who(peer, msg.tid) else b"no")

    @handles(LockOps.STATE)
    def state(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """For repr: free (0), held in the caller's process (1), or elsewhere (2)."""
        state = 0 if self.owner is None else 1 if self.owner[0] == peer.process_id else 2
        server.reply_value(peer, req_id, state)

    def run_guarded(self, who: Owner, fn: Callable[[], None]) -> None:
        """Run ``fn`` now if the lock is free or held by ``who``, else when it is freed."""
        if self.owner is None or self.owner == who:
            fn()
        else:
            self.guarded.append((who, fn))

    def _free(self, server: Server) -> None:
        self.owner, self.count = None, 0
        guarded, self.guarded = self.guarded, []
        for _, fn in guarded:
            fn()
        while self.owner is None and self.waiters:
            w = self.take(self.waiters[0])
            (self.owner, self.count), self.granted = w.data, w.req_id
            if not server.reply(w.peer, w.req_id, b"ok"):
                self.owner, self.count = None, 0  # that waiter is gone: the next one
            else:  # released if its caller, between connections, gives up
                server.receipts.if_unclaimed(w.req_id, functools.partial(
                    self._unclaimed, server, self.owner, w.req_id))

    def _unclaimed(self, server: Server, owner: Owner, granted: bytes) -> None:
        """A grant its caller never got (see ``Receipts.if_unclaimed``) is given back."""
        if self.owner == owner and self.granted == granted:
            self._free(server)

    def unlocked_error(self) -> Exception:
        """What releasing the lock when it is free raises (``multiprocessing.Lock``'s)."""
        return ValueError("semaphore or lock released too many times")

    #: Whether a holder that ends releases the lock (fiber's locks); its waits are
    #: dropped either way.
    freed_by_holders_end = True

    def process_gone(self, server: Server, process_id: bytes) -> None:
        super().process_gone(server, process_id)  # its waits
        if (self.freed_by_holders_end and self.owner is not None
                and self.owner[0] == process_id):
            granted = self.granted if len(self.granted) == TICKET_BYTES else b""
            self.taken[self.owner] = granted
            if len(self.taken) > _REMEMBERED:
                self.taken.popitem(last=False)
            if granted:  # a grant its caller may ask for again: it stands no more
                server.receipts.revoke(granted)
            self._free(server)


class ThreadingLockService(LockService):
    """A lock with ``threading.Lock``'s semantics (what a ``SyncManager`` serves): held
    by nobody in particular, so a holder that ends does not release it."""

    def __init__(self) -> None:
        super().__init__(recursive=False)

    def unlocked_error(self) -> Exception:
        return RuntimeError("release unlocked lock")  # threading.Lock's words

    freed_by_holders_end = False


def _note(name: bytes, delta: int) -> None:
    tid = threading.get_ident()
    api = here.api
    with api.locks_held_lock:
        per = api.locks_held.setdefault(name, {})
        n = per.get(tid, 0) + delta
        if n > 0:
            per[tid] = n
        else:
            per.pop(tid, None)
            if not per:
                api.locks_held.pop(name, None)


def _forget(name: bytes) -> None:
    """This thread holds lock ``name`` no more, however often it took it."""
    api = here.api
    with api.locks_held_lock:
        api.locks_held.get(name, {}).pop(threading.get_ident(), None)


@contextlib.contextmanager
def _forgotten_if_lost(name: bytes) -> Iterator[None]:
    """A call on lock ``name`` that raises `LockLostError` (its hub gave this thread's
    hold to another) leaves this thread holding it no more in ``here.api.locks_held``
    either."""
    try:
        yield
    except LockLostError:
        _forget(name)
        raise


class Lock(Handle):
    """A lock held by one (process, thread) at a time; the API of ``multiprocessing.Lock``.

    Released by the hub if its holder's process ends or becomes unreachable.
    """

    _asks_again = True  # its waits outlive a reset (see Handle, fiber._core._parking)

    _recursive = False

    def __init__(self, *, ctx: Optional[BaseContext] = None) -> None:
        #: Only in the creating process (not pickled): lets a Value guard on the server.
        self._service = self._new_service()
        super().__init__(self._service, b"L")

    def _new_service(self) -> LockService:
        return LockService(self._recursive)

    def acquire(self, block: bool = True, timeout: Optional[float] = None) -> bool:
        """Take the lock, waiting up to ``timeout`` s (forever if None); False if not got."""
        tid = _tid()
        with _forgotten_if_lost(self._name):
            status, _ = self._request(LockOps.ACQUIRE,
                                      Acquire.pack(tid, block, timeout),
                                      on_late=lambda s, f: self._abandoned(s, tid, 1),
                                      withdraw=ABANDON)
        if status != b"ok":
            return False
        _note(self._name, 1)
        return True

    def _abandoned(self, status: bytes, tid: bytes, count: int) -> None:
        """An acquire its caller gave up on (KeyboardInterrupt, a signal handler's
        exception) is withdrawn (`ABANDON`); one granted before is released again, each
        of its ``count`` levels (a Condition's wait takes an RLock back at the depth it
        had), so that the lock is not held by nobody for ever."""
        if status == b"ok":
            for _ in range(count):
                self._send(LockOps.RELEASE, Caller.pack(tid))

    def release(self) -> None:
        """Release the lock.

        Raises:
            ValueError: (Lock) it is not held.
            AssertionError: (RLock) the calling thread does not own it.
            LockLostError: it was taken from this thread, its process counted lost.
        """
        with _forgotten_if_lost(self._name):
            self._request(LockOps.RELEASE, Caller.pack(_tid()))
        _note(self._name, -1)

    def _is_mine(self) -> bool:
        api = here.api
        with api.locks_held_lock:
            return threading.get_ident() in api.locks_held.get(self._name, {})

    def _release_save(self) -> int:
        with _forgotten_if_lost(self._name):
            _, frames = self._request(LockOps.RELEASE_SAVE, Caller.pack(_tid()))
        _forget(self._name)
        return reply_of(Count, frames).n

    def _acquire_restore(self, count: int) -> None:
        tid = _tid()
        self._request(LockOps.ACQUIRE_RESTORE, AcquireRestore(tid, count).frames(),
                      on_late=lambda s, f: self._abandoned(s, tid, count), withdraw=ABANDON)
        _note(self._name, count)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _owner_repr(self) -> Tuple[str, object]:
        """multiprocessing's words for the owner, and the recursion count as its RLock
        shows it (``"nonzero"`` when held elsewhere)."""
        try:
            if self._is_mine():
                name = current_process().name
                if threading.current_thread().name != "MainThread":
                    name += "|" + threading.current_thread().name
                api = here.api
                with api.locks_held_lock:
                    count = api.locks_held.get(self._name, {}).get(threading.get_ident(), 0)
                return name, count
            state = loads(self._request(LockOps.STATE, [b""])[1])
        except Exception:
            return "unknown", "unknown"
        return {0: ("None", 0), 1: ("SomeOtherThread", "nonzero")}.get(
            state, ("SomeOtherProcess", "nonzero"))

    def __repr__(self) -> str:
        # as multiprocessing's: <Lock(owner=None)>, <Lock(owner=MainProcess)>
        return f"<{type(self).__name__}(owner={self._owner_repr()[0]})>"


class ManagedLock(Lock):
    """A ``SyncManager``'s ``Lock``: ``threading.Lock``'s semantics, as the standard
    library's manager serves a ``threading.Lock``.

    Any process may release it, so the process that acquired it does not own it: the
    lock stays held when that process ends (a child may take it and leave its release to
    another process, as CPython's ``TestSyncManagerTypes.test_lock`` does), and releasing
    it when free raises ``RuntimeError``. fiber's own `Lock` is released when its holder
    dies instead, as a lock nobody can release any more would block its waiters for ever.
    """

    def _new_service(self) -> LockService:
        return ThreadingLockService()

    def release(self) -> None:
        """Release the lock, whichever process acquired it.

        Raises:
            RuntimeError: it is not held (``threading.Lock``'s error).
        """
        super().release()


class RLock(Lock):
    """A reentrant lock: its owning thread may acquire it again; released as often."""

    _recursive = True

    def __repr__(self) -> str:
        # as multiprocessing's: <RLock(None, 0)>, <RLock(MainProcess, 2)>
        owner, count = self._owner_repr()
        return f"<{type(self).__name__}({owner}, {count})>"


# -- Semaphore, BoundedSemaphore ---------------------------------------------------------


class SemaphoreService(Parking):
    def __init__(self, value: int, maxvalue: Optional[int]) -> None:
        super().__init__()
        self.value = value
        self.maxvalue = maxvalue
        self.released = Made()  # each caller's last release

    @handles(SemaphoreOps.ACQUIRE, Wait)
    def acquire(self, server: Server, peer: Peer, req_id: bytes, msg: Wait) -> None:
        if self.answer_or_park(server, peer, req_id, msg.seconds, self.value > 0):
            self.value -= 1

    protocol = "semaphore"

    @handles(SemaphoreOps.RELEASE)
    def release(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """Answered only when sent as a request."""
        if self.released.again(req_id):
            server.reply(peer, req_id, b"ok")  # made already: its answer was lost
            return
        if self.maxvalue is not None and self.value >= self.maxvalue:
            raise ValueError("semaphore or lock released too many times")
        self.released.made(req_id)
        self._add(server)
        if req_id:
            server.reply(peer, req_id, b"ok")

    def _add(self, server: Server) -> None:
        """One unit more, to the first waiter if any: one its caller, between
        connections, gives up comes back (see ``Receipts.if_unclaimed``)."""
        self.value += 1
        while self.value > 0 and self.waiters:
            w = self.take(self.waiters[0])
            if server.reply(w.peer, w.req_id, b"ok"):
                self.value -= 1
                server.receipts.if_unclaimed(w.req_id, functools.partial(self._add, server))

    @handles(SemaphoreOps.VALUE)
    def get_value(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        server.reply(peer, req_id, b"ok", Count(self.value).frames())


class Semaphore(Handle):
    """A counter that ``acquire`` decrements (waiting at zero) and ``release`` increments."""

    _asks_again = True  # its waits outlive a reset (see Handle, fiber._core._parking)

    _bounded = False

    def __init__(self, value: int = 1, *, ctx: Optional[BaseContext] = None) -> None:
        if value < 0:
            raise ValueError("semaphore initial value must be >= 0")
        self._initial = value
        super().__init__(SemaphoreService(value, value if self._bounded else None), b"S")

    def __getstate__(self) -> Tuple[Tuple[object, ...], int]:
        return (super().__getstate__(), self._initial)

    def __setstate__(self, state: Tuple[Tuple[object, ...], int]) -> None:
        base, self._initial = state
        super().__setstate__(base)

    def acquire(self, block: bool = True, timeout: Optional[float] = None) -> bool:
        """Decrement the counter, waiting while it is zero; True if decremented.

        As ``multiprocessing.Semaphore.acquire``: with ``block`` False, return at once;
        otherwise wait up to ``timeout`` seconds (forever if None). The wait is decided by the
        creator's hub, so it holds across processes on any hosts.

        Returns:
            True if the counter was decremented, False if ``block`` is False or the timeout
            passed first.

        Raises:
            fiber.errors.TransportError: the semaphore's creator process is gone or unreachable.
        """
        status, _ = self._request(SemaphoreOps.ACQUIRE, Wait.of(block, timeout).frames(),
                                  on_late=self._abandoned, withdraw=ABANDON)
        return status == b"ok"

    def _abandoned(self, status: bytes, frames: Sequence[Frame]) -> None:
        """As `Lock._abandoned`: a unit granted to an abandoned acquire is given back."""
        if status == b"ok":
            self._send(SemaphoreOps.RELEASE)

    def release(self) -> None:
        """Increment the counter (BoundedSemaphore: ValueError above the initial value)."""
        self._request(SemaphoreOps.RELEASE)

    def get_value(self) -> int:
        """The counter's current value, as the creator's hub holds it.

        Unlike ``multiprocessing``'s, it works on macOS too (no ``sem_getvalue`` is involved);
        like any shared value, it may have changed by the time it is read.

        Raises:
            fiber.errors.TransportError: the semaphore's creator process is gone or unreachable.
        """
        _, frames = self._request(SemaphoreOps.VALUE)
        return reply_of(Count, frames).n

    @property
    def _semlock(self) -> _SemLockView:
        """What ``multiprocessing.queues.Queue`` reads of the semaphore it is given
        (``full()``, ``qsize()``), so that one made with a fiber context works."""
        return _SemLockView(self)

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        # as multiprocessing's: <Semaphore(value=1)>, <BoundedSemaphore(value=1, maxvalue=1)>
        try:
            value: Any = self.get_value()
        except Exception:
            value = "unknown"
        bound = f", maxvalue={self._initial}" if self._bounded else ""
        return f"<{type(self).__name__}(value={value}{bound})>"


class BoundedSemaphore(Semaphore):
    """A Semaphore whose ``release`` above its initial value raises ValueError."""

    _bounded = True


class _SemLockView:
    """The two private methods of ``_multiprocessing.SemLock`` that the standard library's
    queues call on their semaphore, answered by the semaphore's server."""

    def __init__(self, sem: Semaphore) -> None:
        self._sem = sem

    def _get_value(self) -> int:
        return self._sem.get_value()

    def _is_zero(self) -> bool:
        return self._sem.get_value() == 0

