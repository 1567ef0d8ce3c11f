"""Queue items lent ahead to a consumer in another process, so that a consumer at a
distance is not paced by one round trip per ``get``: the consumer's `Lease` (its own
connection and thread) and the hub's `Loans`. Each item is still got exactly once, in put
order, also across resets and recalls: the protocol, its rules and what they keep true are
in docs/contributing/queues.md.
"""

from __future__ import annotations

import collections
import os
import queue as _queue
import socket
import struct
import threading
import time
from typing import Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .._core import _runtime
from .._core._clients import own_client, plain_client
from .._process_state import here
from ..transport import _resend
from ..transport.client import Client, ConnectionLost
from ..transport.receipts import REANCHOR_WAIT_S
from ..transport.serialization import Frame
from ..transport.server import Peer

__all__ = ["LendOps", "RECALL", "Loans", "Lease", "LEND_BYTES", "pack_loan", "unpack_loan",
           "Pull", "LeaseItems", "LeaseKey"]

#: A pull is answered with at most this many bytes of items (at least one item), so that
#: large items (arrays) are not lent to one consumer by the dozen.
LEND_BYTES = 1 << 20

_Q = struct.Struct("<Q")


class LendOps:
    """The lending protocol's operations (requests to a queue's service)."""

    PULL = b"pull"
    ACK = b"ack"
    RETURN = b"return"
    SETTLE = b"settle"  # [key]: the lease's connection was reset; what it did not take


class Pull(NamedTuple):
    """``pull``: lend up to ``batch`` items to the lease ``key``."""

    batch: int
    key: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Pull:
        return cls(_Q.unpack(payload[0])[0], bytes(payload[1]))

    def frames(self) -> List[Frame]:
        return [_Q.pack(self.batch), self.key]


class LeaseItems(NamedTuple):
    """``ack`` (the lease ``key`` took these items), ``return`` (it gives them back):
    the items' seqs, as its pulls' answers numbered them."""

    key: bytes
    seqs: List[int]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> LeaseItems:
        unpack = _Q.unpack
        return cls(bytes(payload[0]), [unpack(f)[0] for f in payload[1:]])

    def frames(self) -> List[Frame]:
        return [self.key, *map(_Q.pack, self.seqs)]


class LeaseKey(NamedTuple):
    """``settle``: the lease whose items not taken go back to the queue."""

    key: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> LeaseKey:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.key]


#: Pushed by the hub to a lease: give back what you hold and have not taken.
RECALL = b"recall"
#: Seconds a lease's `Lease.close` waits for the hub to answer its ``settle``.
CLOSE_WAIT_S = 10.0


def pack_loan(first: int, items: List[Sequence[Frame]]) -> List[Frame]:
    """The frames of a pull's answer: ``[first seq, n, frame counts]`` then the items'
    frames."""
    head = struct.pack(f"<QI{len(items)}I", first, len(items), *(len(i) for i in items))
    return [head, *(f for item in items for f in item)]


def unpack_loan(frames: Sequence[Frame]) -> List[Tuple[int, Sequence[Frame]]]:
    """``[(seq, item frames)]`` of a pull's answer."""
    first, n = struct.unpack_from("<QI", frames[0])
    counts = struct.unpack_from(f"<{n}I", frames[0], 12)
    out: List[Tuple[int, Sequence[Frame]]] = []
    at = 1
    for i, k in enumerate(counts):
        out.append((first + i, list(frames[at:at + k])))
        at += k
    return out


class _Account:
    __slots__ = ("items", "next_seq", "recalling", "peer", "process_id", "reset_at")

    def __init__(self, peer: Optional[Peer]) -> None:
        #: seq -> (its position in the queue, frames), in seq order (see fiber.queues._items)
        self.items: Dict[int, Tuple[int, Sequence[Frame]]] = {}
        self.next_seq = 1
        self.recalling = False
        self.peer = peer  # the lease's connection; None once it was reset
        self.process_id = peer.process_id if peer is not None else b""
        self.reset_at = 0.0  # when its connection was reset (monotonic)


class Loans:
    """What one queue's hub has lent, per lease (under the hub's lock).

    An account is the lease's, by the key it sent with its pulls, not its connection's:
    an ``ack`` that a reset lost is sent again on another connection of the consumer's
    (fiber.transport._resend), and must still find the items it takes. So a lease whose
    connection was reset keeps its items lent (`orphan`) until its ``settle`` comes,
    behind those ``ack``s; or until its process is gone (it did not anchor again within
    ``REANCHOR_WAIT_S``); or, at the latest, `SETTLE_WAIT_S` after the reset."""

    #: Seconds a reset lease of a living process may hold its items without settling.
    SETTLE_WAIT_S = 60.0

    def __init__(self) -> None:
        self._accounts: Dict[bytes, _Account] = {}
        self._keys: Dict[Peer, bytes] = {}  # a live lease connection -> its lease's key
        #: Items lent and neither taken nor given back: they are still in the queue.
        self.count = 0

    def lend(self, peer: Peer, key: bytes, pos: int, items: List[Sequence[Frame]]) -> int:
        """Record ``items`` (their frames, from position ``pos`` on: see
        fiber.queues._items) as lent to the lease ``key`` on ``peer``; their first seq."""
        acct = self._accounts.get(key)
        if acct is None:
            acct = self._accounts[key] = _Account(peer)
            self._keys[peer] = key
        first = acct.next_seq
        for i, item in enumerate(items):
            acct.items[first + i] = (pos + i, item)
        acct.next_seq += len(items)
        acct.recalling = False
        self.count += len(items)
        return first

    def take(self, key: bytes, seqs: List[int]) -> None:
        """The lease ``key`` took these items: they left the queue."""
        acct = self._accounts.get(key)
        if acct is None:
            return
        for seq in seqs:
            if acct.items.pop(seq, None) is not None:
                self.count -= 1

    def give_back(self, key: bytes, seqs: Optional[List[int]] = None
                  ) -> List[Tuple[int, Sequence[Frame]]]:
        """Items the lease ``key`` gives back (``seqs``; None: all it holds, as when its
        connection ended), ``(position, frames)``, to go back to their places."""
        acct = self._accounts.get(key)
        if acct is None:
            return []
        if seqs is None:
            del self._accounts[key]
            if acct.peer is not None:
                self._keys.pop(acct.peer, None)
            seqs = list(acct.items)
        acct.recalling = False
        back = [acct.items.pop(s) for s in sorted(seqs) if s in acct.items]
        self.count -= len(back)
        return back

    def key_of(self, peer: Peer) -> Optional[bytes]:
        """The key of the lease whose connection ``peer`` is, if it is one."""
        return self._keys.get(peer)

    def orphan(self, peer: Peer) -> Optional[bytes]:
        """``peer``'s lease connection was reset: its account stays (a late ``ack``
        finds it), recalled from no one; its key, to give it back later."""
        key = self._keys.pop(peer, None)
        if key is not None:
            acct = self._accounts[key]
            acct.peer, acct.reset_at = None, time.monotonic()
        return key

    def settled_by(self, key: bytes, alive: Callable[[bytes], bool]) -> Optional[float]:
        """Whether the reset lease ``key`` must give its items back now (None), in how
        many seconds to ask again (while its process lives, ``alive(process_id)``, and
        `SETTLE_WAIT_S` has not passed, its ``settle`` may still come), or 0.0: nothing
        to wait for (it settled, or its account is not a reset one)."""
        acct = self._accounts.get(key)
        if acct is None or acct.peer is not None:
            return 0.0
        left = acct.reset_at + self.SETTLE_WAIT_S - time.monotonic()
        if left > 0 and alive(acct.process_id):
            return min(left, REANCHOR_WAIT_S)
        return None

    def to_recall(self) -> List[Peer]:
        """The consumers holding lent items not yet asked for them (marked asked)."""
        out = []
        for acct in self._accounts.values():
            if acct.items and not acct.recalling and acct.peer is not None:
                acct.recalling = True
                out.append(acct.peer)
        return out


class Lease:
    """A consumer process's items lent ahead by one queue's hub, on a connection of its
    own read by a thread of its own (which answers recalls even while no ``get`` runs).

    The connection is made by that thread (a ``get`` does not wait for it), which then
    sends the first pull. Every send on it is made under ``_cond``'s lock, the order the
    hub then sees; only the lease's thread reads it.
    """

    def __init__(self, address: str, name: bytes, batch: int) -> None:
        self._address = address
        self._name = name
        self._batch = batch
        self._client: Optional[Client] = None
        self._cond = threading.Condition()
        self._buffer: Deque[Tuple[int, Sequence[Frame]]] = collections.deque()
        #: A pull asked for and not answered yet (the first one: sent once connected).
        self._pulling = True
        self._more = False
        #: Items given back at a recall whose return the hub has not answered yet: a
        #: ``get`` waits for it (see `take`).
        self._returning = False
        #: Names this lease's account at the hub, whatever connection a message takes.
        self.key = os.urandom(8)
        self.pid = here.pid
        self.broken = False
        self._closing = False  # close() gave back what it held: nothing to settle
        here.api.live_leases.add(self)
        self._thread = threading.Thread(target=self._run, name="fiber-queue-lease",
                                        daemon=True)
        self._thread.start()

    def take(self, block: bool, timeout: Optional[float]) -> Optional[Sequence[Frame]]:
        """The next lent item's frames, taken (the hub is told before it is returned).
        While a pull is under way its items may all be on their way here, so it is
        waited for, also by a ``get`` that does not block (a round trip), and up to
        ``timeout`` by one that does.

        So is the answer to items given back at a recall: a ``get`` sent to the hub
        before they are in the queue again (on this thread's connection, not the
        lease's) could be answered with an item put after them, a reader's sentinel
        (docs/contributing/queues.md).

        Returns None when nothing is lent here or coming: ask the hub directly. So does
        a lease whose connection is not made yet: nothing can be on its way, and its
        first pull waits for the next backlog a ``get`` meets (sent now, it could
        overtake that ``get``). Waiting for it instead, a ``get`` waited as long as
        the connection took, up to its timeout (once, on the lossy reset test: a
        consumer's ``get`` raised ``Empty`` after 30 s with 5,918 items queued, and a
        new lease's connection not made is the one wait that fits).

        Raises:
            queue.Empty: ``timeout`` passed while a pull was under way.
        """
        deadline = None if timeout is None or not block else time.monotonic() + timeout
        with self._cond:
            if self._client is None:  # (items come only on its connection)
                self._pulling = False
                return None
            while (not self._buffer and (self._pulling or self._returning)
                   and not self.broken):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise _queue.Empty
                self._cond.wait(left)
            if not self._buffer or self.broken or self._closing or self._client is None:
                return None
            seq, frames = self._buffer[0]
            try:
                self._client.send(self._name, LendOps.ACK, LeaseItems(self.key, [seq]).frames())
            except ConnectionLost:  # not told: the hub puts it back, it is not ours
                self._broke()
                return None
            self._buffer.popleft()
            if self._more and not self._pulling and len(self._buffer) <= self._batch // 2:
                self._pull()
            return frames

    def held(self) -> int:
        """Lent items here, not taken yet."""
        with self._cond:
            return len(self._buffer)

    def pull(self) -> None:
        """The hub said more items are queued: ask for some ahead."""
        with self._cond:
            if not self._pulling and not self.broken:
                self._pull()

    def request(self, op: bytes, frames: Sequence[Frame], timeout: Optional[float] = None
                ) -> Optional[Tuple[bytes, List[Frame]]]:
        """Send a request of the queue's protocol on the lease's connection, after the
        ``ack``s of this process's takes (so that a ``qsize`` after a ``get`` counts
        it), and wait for its reply (up to ``timeout`` s); None if the connection is
        not there (not made yet: nothing was taken through it; or gone), or was lost
        before the reply, or it did not come in time."""
        box: List[Tuple[bytes, List[Frame]]] = []

        def on_reply(status: bytes, payload: List[Frame]) -> None:
            with self._cond:
                box.append((status, payload))
                self._cond.notify_all()

        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            if self.broken or self._client is None:
                return None
            try:
                self._client.start(self._name, op, frames, on_reply=on_reply)
            except ConnectionLost:
                self._broke()
                return None
            while not box and not self.broken:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cond.wait(left)
            return box[0] if box else None

    def close(self) -> None:
        """Give back what is held and end the connection (the thread ends with it).

        ``settle`` puts back at the hub all it lent here and was not told taken, and
        its answer is waited for (up to `CLOSE_WAIT_S`): the ``ack``s sent before it
        are then counted. Closing the connection while data for it is unread (a pull's
        answer on its way, a recall) makes the kernel reset it, which drops what it had
        not transmitted yet, its last ``ack``s among them: the hub would put back items
        it took."""
        if self.pid != here.pid:
            return  # a forked child's copy (see _forget_in_child)
        with self._cond:
            self._closing = True  # no take from now on: settle gives back all it holds
        if threading.current_thread() is self._thread:  # its reader: no answer can come
            with self._cond:
                if not self.broken and self._client is not None:
                    try:
                        self._client.send(self._name, LendOps.SETTLE, LeaseKey(self.key).frames())
                    except ConnectionLost:
                        pass  # reset or gone: the hub holds or puts back what it lent
        else:
            self.request(LendOps.SETTLE, LeaseKey(self.key).frames(), timeout=CLOSE_WAIT_S)
        with self._cond:
            self._broke()
        self._shut()

    # -- under the lock -------------------------------------------------------------------

    def _pull(self) -> None:
        if self._client is None:
            self._pulling = True  # sent once the connection is made
            return
        try:
            self._client.start(self._name, LendOps.PULL, Pull(self._batch, self.key).frames(),
                               on_reply=self._pulled)
        except ConnectionLost:
            self._broke()
            return
        self._pulling = True

    def _give_back(self, client: Client) -> None:
        """Give back every item held here and not taken (a recall): a request, whose
        answer says they are at the front of the queue again (see `take`)."""
        if self._buffer:
            client.start(self._name, LendOps.RETURN,
                         LeaseItems(self.key, [s for s, _ in self._buffer]).frames(),
                         on_reply=self._returned)
            self._returning = True
            self._buffer.clear()

    def _broke(self) -> None:
        """The connection is gone (or closed): the hub puts back what it lent, and
        nothing held here may be taken now."""
        self.broken = True
        self._pulling = self._returning = False
        self._buffer.clear()
        self._cond.notify_all()

    # -- the lease's thread ---------------------------------------------------------------

    def _returned(self, status: bytes, frames: Sequence[Frame]) -> None:
        with self._cond:
            self._returning = False
            self._cond.notify_all()

    def _pulled(self, status: bytes, frames: Sequence[Frame]) -> None:
        with self._cond:
            self._pulling = False
            if status in (b"ok", b"more") and not self.broken:
                self._buffer.extend(unpack_loan(frames))
                self._more = status == b"more"
            self._cond.notify_all()

    def _run(self) -> None:
        try:
            client = own_client(self._address)
        except Exception:  # no lending, then: gets go to the hub as before
            with self._cond:
                self._broke()
            return
        with self._cond:
            self._client = client
            if self.broken:  # closed meanwhile
                client.close()
                return
            want, self._pulling = self._pulling, False
            if want:
                self._pull()
        try:
            while True:
                msg = client.next_push(None)
                if msg is not None and bytes(msg[1]) == RECALL:
                    with self._cond:
                        if not self.broken:
                            self._give_back(client)
        except BaseException:  # the connection ended (or was closed): so does the lease
            pass
        finally:
            with self._cond:
                self._broke()
                settle = not self._closing and self._last_words(client)
            self._shut()
        if settle:
            try:
                plain_client(self._address).close()  # a new connection sends them first
            except Exception:  # noqa: S110 - kept for the next connection, or said at exit
                pass

    def _last_words(self, client: Client) -> bool:
        """(under the lock, so that every ``ack`` sent on the ended connection was kept or
        filed first) The connection ended, not closed here: after the ``ack``s it may
        have lost (fiber.transport._resend), ``settle`` (the rest goes back to the
        queue), to go now on a new connection, rather than with this process's next
        one, which may come late.

        Whatever the end looked like: a reset that another thread's check read first
        (`fiber.transport.channels.prune_closed`) leaves this one a plain end, and the hub
        then held the items up to `Loans.SETTLE_WAIT_S`. Where the hub did close the
        connection (its process ended, or it put back what was lent), a settle finds
        nothing: the hub's end refuses the connection, or the account is gone."""
        if self.pid != here.pid or not client.lost:
            return False
        _resend.orphan(self._address, (client.peer_id, [
            (_resend.ALWAYS, self._name, LendOps.SETTLE, LeaseKey(self.key).frames())]))
        return True

    def _shut(self) -> None:
        client = self._client
        if client is None or self.pid != here.pid:
            return
        try:
            client.sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's read
        except OSError:
            pass
        client.close()

    def _forget_in_child(self) -> None:
        """In a child forked from this lease's process: the connection is the parent's
        (its items, its acks); close this copy of it, so that the parent's end is seen
        when the parent ends, and take nothing through it."""
        self._cond = threading.Condition()  # the parent's may have been held at the fork
        self.broken = True
        self._pulling = self._returning = False
        self._buffer.clear()
        if self._client is not None:
            try:
                self._client.sock.close()
            except OSError:
                pass


def _after_fork_in_child() -> None:
    for lease in list(here.api.live_leases):
        lease._forget_in_child()  # noqa: SLF001 - this module's class


def _close_all() -> None:
    """At this process's clean end: each lease settles (see `Lease.close`) before the
    process's connections close (a job's queue handles live until then: its Process
    object holds its arguments)."""
    for lease in list(here.api.live_leases):
        lease.close()


here.after_fork_in_child(_after_fork_in_child)
_runtime.on_process_end(_close_all)
