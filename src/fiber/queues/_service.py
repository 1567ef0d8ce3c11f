"""The hub's side of a queue: ``QueueService``, the state of one queue on its creator's
hub thread, and the protocol's operations (the handles' side, and the protocol's
picture, are in `fiber.queues._queue`)."""

from __future__ import annotations

import collections
from typing import Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from .._core._served import Count, decode_wait, pack_wait
from .._log import info
from ..transport.client import Cancel
from ..transport.framing import frames_nbytes
from ..transport.operations import handles
from ..transport.receipts import REANCHOR_WAIT_S, SKIP, Receipts
from ..transport.serialization import Frame
from ..transport.server import Peer, Server, Service, Timer
from ._items import Item, QueueItems
from ._lending import LEND_BYTES, RECALL, LeaseItems, LeaseKey, LendOps, Loans, Pull, pack_loan
from ._reader import ReadySignal

__all__ = ["QueueOps", "QueueService", "PutWait", "Get", "Withdraw", "TaskDone"]

#: a waiting get: its connection, request id, timer and ticket (see fiber.transport.receipts)
_Waiter = Tuple[Peer, bytes, Optional[Timer], bytes]
#: A parked bounded put: (peer, req_id, timer, frames, ticket).
_Putter = Tuple[Peer, bytes, Optional[Timer], Sequence[Frame], bytes]


class QueueOps:
    """The queue protocol's operations (requests to a `QueueService`)."""

    PUT = b"put"
    PUT_WAIT = b"put_wait"
    WITHDRAW = b"withdraw"
    GET = b"get"
    CANCEL = b"cancel"
    UNGET = b"unget"
    SIZE = b"size"
    TASK_DONE = b"task_done"
    JOIN = b"join"
    SYNC = b"sync"
    # items lent ahead to a consumer elsewhere (fiber.queues._lending)
    PULL = LendOps.PULL
    ACK = LendOps.ACK
    RETURN = LendOps.RETURN
    SETTLE = LendOps.SETTLE


# A put's and a get's records are on every item's way: made as `namedtuple._make` makes a
# record (tuple.__new__, no call of the class's __new__).
_tuple_new = tuple.__new__


class PutWait(NamedTuple):
    """``put_wait``, a bounded put: how long it may wait for room, its ticket (asked
    again with it after a reset: put once), and the item's frames as they came."""

    wait: Optional[float]  # as `fiber._core._served.Wait`'s seconds
    ticket: bytes
    item: Sequence[Frame]

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> PutWait:
        return _tuple_new(cls, (decode_wait(payload[0]), bytes(payload[1]), payload[2:]))

    def frames(self) -> List[Frame]:
        return [pack_wait(self.wait), self.ticket, *self.item]

    @staticmethod
    def wait_of(frames: Sequence[Frame]) -> Optional[float]:
        """The wait of a ``put_wait``'s frames, the rest not decoded (its client asks
        whether the put may wait)."""
        return decode_wait(frames[0])


class Get(NamedTuple):
    """``get``: how long it may wait for an item, and its ticket (asked again with it
    after a reset: the same item); none (b"") where no reset can cut it off."""

    wait: Optional[float]  # as `fiber._core._served.Wait`'s seconds
    ticket: bytes = b""

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Get:
        return _tuple_new(cls, (decode_wait(payload[0]),
                                bytes(payload[1]) if len(payload) > 1 else b""))

    def frames(self) -> List[Frame]:
        wait, ticket = self
        frame = pack_wait(wait)
        return [frame, ticket] if ticket else [frame]


class Withdraw(NamedTuple):
    """``withdraw``: the ticket of the bounded put its caller gave up on."""

    ticket: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> Withdraw:
        return cls(bytes(payload[0]))

    def frames(self) -> List[Frame]:
        return [self.ticket]


class TaskDone(NamedTuple):
    """``task_done``: its ticket (asked again with it after a reset: counted once)."""

    ticket: bytes

    @classmethod
    def decode(cls, payload: Sequence[Frame]) -> TaskDone:
        return cls(bytes(payload[0]) if payload else b"")

    def frames(self) -> List[Frame]:
        return [self.ticket]


class QueueService(Service):
    """The state of one queue, on its creator's hub thread."""

    protocol = "queue"

    def __init__(self, maxsize: int, joinable: bool) -> None:
        self.maxsize = maxsize
        self.joinable = joinable
        #: In put order, also those a consumer gave back (see fiber.queues._items).
        self.items = QueueItems()
        self.getters: Deque[_Waiter] = collections.deque()
        #: The connection of each parked get that has a ticket, by ticket (and some that
        #: left, until `_older_copy` sweeps them): found at once when one is asked again.
        self.asked: Dict[bytes, Peer] = {}
        self.putters: Deque[_Putter] = collections.deque()
        self.joiners: List[Tuple[Peer, bytes]] = []
        self.unfinished = 0
        #: Items lent ahead to consumers on other processes (see fiber.queues._lending):
        #: still in the queue until taken.
        self.loans = Loans()
        #: The last item handed to each getter elsewhere, until it is known to have
        #: arrived (see fiber.transport.receipts).
        self.receipts = Receipts()
        #: Set by the queue's ``_reader`` (see fiber.queues._reader) once it is used.
        self.signal: Optional[ReadySignal] = None

    def _full(self) -> bool:
        return 0 < self.maxsize <= len(self.items) + self.loans.count

    def handle(self, server: Server, peer: Peer, op: bytes, req_id: bytes,
               payload: List[Frame]) -> None:
        super().handle(server, peer, op, req_id, payload)
        self._show()
        if self.signal is not None:
            self._recall(server)

    def _show(self) -> None:
        """Make the creator's ``_reader`` readable while an item waits (it may be waiting
        on it): after each request, and after items came back without one."""
        if self.signal is not None:
            self.signal.show(bool(self.items))

    @handles(QueueOps.PUT)
    def put(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """Unbounded, fire-and-forget: the item's frames."""
        self._add(server, payload)

    @handles(QueueOps.PUT_WAIT, PutWait)
    def put_wait(self, server: Server, peer: Peer, req_id: bytes, msg: PutWait) -> None:
        """Bounded: always answered; asked again after a reset (same ticket), answered as
        it was (an item admitted is not put twice)."""
        if not self._answered_again(server, peer, req_id, msg.ticket, "bounded put"):
            self._put_wait(server, peer, req_id, msg.wait, msg.ticket, msg.item)

    def _answered_again(self, server: Server, peer: Peer, req_id: bytes, asked: bytes,
                        what: str) -> bool:
        """Whether request ``asked`` was served already (its reply was lost in a reset:
        sent again now, and said at INFO) or is an older connection's copy of one asked
        again."""
        again = self.receipts.again(asked, peer)
        if again is not None and again is not SKIP:
            info("a %s's reply, cut off by a connection's reset, was sent again", what)
            server.reply(peer, req_id, *again)
        return again is not None

    @handles(QueueOps.WITHDRAW, Withdraw)
    def withdraw(self, server: Server, peer: Peer, req_id: bytes, msg: Withdraw) -> None:
        """The caller of a bounded put gave up."""
        self._withdraw(server, peer, msg.ticket)

    @handles(QueueOps.GET, Get)
    def get(self, server: Server, peer: Peer, req_id: bytes, msg: Get) -> None:
        """An item, now or once one comes (or ``empty``)."""
        wait, asked = msg
        if asked and self._answered_again(server, peer, req_id, asked, "get"):  # the same item
            return
        if self.items:
            self._hand_out(server, peer, req_id, asked)
        elif wait == 0:
            server.reply(peer, req_id, b"empty")
            self._recall(server)  # a get that polls must not starve either
        else:
            if asked and self._older_copy(peer, asked):
                return
            getter: _Waiter = (peer, req_id, None, asked)
            timer = None if wait is None else server.call_later(
                wait, lambda: self._expire(server, self.getters, getter, b"empty"))
            self.getters.append((peer, req_id, timer, asked))
            self._serve(server)  # recalls what is lent, if anything is

    def _older_copy(self, peer: Peer, asked: bytes) -> bool:
        """Whether this get is an older connection's copy of one asked again with its
        ticket, to be dropped (its connection is not read). A copy waiting here from an
        older connection (it failed on its caller's side only: a timeout, the hub sees it
        open) is dropped instead: an item handed to it would go into a connection nobody
        reads, while its caller waits on the new one for ever. (A parked get is not
        recorded in `receipts`, which sees to a copy that was answered.) Connections are
        numbered as they come (``peer_id``), as `receipts` tells their copies apart."""
        waiting = self.asked.get(asked)
        if waiting is not None and waiting is not peer:
            if peer.peer_id < waiting.peer_id:
                return True
            for i, (_, _, timer, ticket) in enumerate(self.getters):
                if ticket == asked:
                    del self.getters[i]
                    if timer is not None:
                        timer.cancel()
                    break
        if len(self.asked) > 2 * len(self.getters) + 64:  # (gets cancelled, expired, gone)
            self.asked = {g[3]: g[0] for g in self.getters if g[3]}
        self.asked[asked] = peer
        return False

    @handles(QueueOps.CANCEL, Cancel)
    def cancel(self, server: Server, peer: Peer, req_id: bytes, msg: Cancel) -> None:
        """A get its caller gave up on is dropped if it still waits. Answered in any
        case: an item handed to it before was sent first, on the same connection, and
        its caller gives it back (``unget``) before it takes this answer."""
        for i, (gpeer, greq, timer, _) in enumerate(self.getters):
            if gpeer is peer and greq == msg.req_id:
                del self.getters[i]
                if timer is not None:
                    timer.cancel()
                break
        server.reply(peer, req_id, b"ok")

    @handles(QueueOps.UNGET)
    def unget(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """A late reply to an abandoned get: the item goes back to the front."""
        self.items.push_first(payload)
        self._serve(server)

    @handles(QueueOps.SIZE)
    def size(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        server.reply(peer, req_id, b"ok", Count(len(self.items) + self.loans.count).frames())

    @handles(QueueOps.PULL, Pull)
    def pull(self, server: Server, peer: Peer, req_id: bytes, msg: Pull) -> None:
        """Lend up to ``batch`` items (and `LEND_BYTES`, at least one) to a consumer's
        lease; none while a ``get`` waits (it goes first), nor while items given back
        wait (`QueueItems.lendable`). Answered ``more`` if items remain to lend."""
        n, key = msg
        items, pos, size = self.items, self.items.head, 0
        lent: List[Sequence[Frame]] = []
        if not items.back and not self.getters:  # (QueueItems.take, inline: the hot path)
            while items and len(lent) < n and size < LEND_BYTES:
                frames = items.popleft()
                lent.append(frames)
                size += frames_nbytes(frames)
            items.head = pos + len(lent)
        first = self.loans.lend(peer, key, pos, lent)
        if not server.reply(peer, req_id, b"more" if items.lendable() else b"ok",
                            pack_loan(first, lent)):
            self._put_back(server, self.loans.give_back(key))  # the consumer vanished

    @handles(QueueOps.ACK, LeaseItems)
    def ack(self, server: Server, peer: Peer, req_id: bytes, msg: LeaseItems) -> None:
        """A consumer took lent items: they left the queue (room for a bounded put)."""
        self.loans.take(msg.key, msg.seqs)
        self._admit_putters(server)

    @handles(QueueOps.SETTLE, LeaseKey)
    def settle(self, server: Server, peer: Peer, req_id: bytes, msg: LeaseKey) -> None:
        """A lease ends (closed, after its ``ack``s: answered ``ok`` when asked), or its
        connection was reset (sent on a new one, after the ``ack``s it sent again):
        what it holds and did not take goes back to the queue."""
        self._put_back(server, self.loans.give_back(msg.key))
        if req_id:
            server.reply(peer, req_id, b"ok")

    def _settle_later(self, server: Server, key: bytes, delay: float) -> None:
        """In ``delay`` s: the reset lease ``key``'s items go back, unless it settled or
        its process lives and may still settle (see `Loans.settled_by`)."""
        def check() -> None:
            again = self.loans.settled_by(key, server.process_alive)
            if again is None:
                self._put_back(server, self.loans.give_back(key))
            elif again > 0:
                self._settle_later(server, key, again)

        server.call_later(delay, check)

    @handles(QueueOps.RETURN, LeaseItems)
    def give_back(self, server: Server, peer: Peer, req_id: bytes, msg: LeaseItems) -> None:
        """A consumer gives back lent items it did not take (recalled), answered once
        they are at the front of the queue again, before its next ``get`` is sent."""
        self._put_back(server, self.loans.give_back(msg.key, msg.seqs))
        if req_id:
            server.reply(peer, req_id, b"ok")

    def _put_back(self, server: Server, items: List[Item]) -> None:
        """Lent items come back, each to its place in the queue (ahead of every item put
        after it: see fiber.queues._items)."""
        self.items.give_back(items)
        self._serve(server)
        self._show()  # (from a consumer's end, or a timer: not only from a request)

    @handles(QueueOps.TASK_DONE, TaskDone)
    def task_done(self, server: Server, peer: Peer, req_id: bytes, msg: TaskDone) -> None:
        """Asked again after a reset, answered, not counted twice."""
        asked = msg.ticket
        if self._answered_again(server, peer, req_id, asked, "task_done"):
            return
        if self.unfinished <= 0:
            raise ValueError("task_done() called too many times")
        self.unfinished -= 1
        server.reply(peer, req_id, b"ok")
        self.receipts.handed(asked, b"ok", [], peer)
        if self.unfinished == 0:
            for jpeer, jreq in self.joiners:
                server.reply(jpeer, jreq, b"ok")
            self.joiners.clear()

    @handles(QueueOps.JOIN)
    def join(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        if self.unfinished == 0:
            server.reply(peer, req_id, b"ok")
        else:
            self.joiners.append((peer, req_id))

    @handles(QueueOps.SYNC)
    def sync(self, server: Server, peer: Peer, req_id: bytes, payload: List[Frame]) -> None:
        """Answered once every request sent before it on the connection was handled."""
        server.reply(peer, req_id, b"ok")

    def _put_wait(self, server: Server, pid: Peer, req_id: bytes, wait: Optional[float],
                  ticket: bytes, frames: Sequence[Frame]) -> None:
        if not self._full():
            self._add(server, frames)
            server.reply(pid, req_id, b"ok")
            self.receipts.handed(ticket, b"ok", [], pid)
        elif wait == 0:
            server.reply(pid, req_id, b"full")
        else:
            entry = (pid, req_id)
            timer = None if wait is None else server.call_later(
                wait, lambda: self._expire(server, self.putters, entry, b"full"))
            self.putters.append((pid, req_id, timer, frames, ticket))

    def _withdraw(self, server: Server, pid: Peer, ticket: bytes) -> None:
        """Drop the put ``ticket`` if still parked: it never happened. If it was admitted
        (or timed out) before this arrived, there is nothing to undo. (By its ticket
        alone: a withdraw may come on another connection than its put's.)"""
        for i, (ppid, preq, timer, _, pticket) in enumerate(self.putters):
            if pticket == ticket:
                del self.putters[i]
                if timer is not None:
                    timer.cancel()
                server.reply(ppid, preq, b"withdrawn")  # consumes the put's late handler
                return

    def _add(self, server: Server, frames: Sequence[Frame]) -> None:
        self.items.append(frames)
        if self.joinable:
            self.unfinished += 1
        self._serve(server)

    def _hand_out(self, server: Server, pid: Peer, req_id: bytes, asked: bytes) -> bool:
        items = self.items  # (QueueItems.take and .lendable, inline: the hot path)
        frames = items.popleft()
        if items.back:
            pos = items.back.popleft()
        else:
            pos = items.head
            items.head = pos + 1
        # "more": items wait behind this one, so a consumer elsewhere may pull some ahead
        status = b"more" if items and not items.back else b"ok"
        if not server.reply(pid, req_id, status, frames):
            items.give_back([(pos, frames)])  # the reader vanished: keep the item
            return False
        if asked:
            self.receipts.handed(asked, status, frames, pid)
        if self.putters:
            self._admit_putters(server)
        return True

    def _admit_putters(self, server: Server) -> None:
        while self.putters and not self._full():
            ppid, preq, timer, frames, ticket = self.putters.popleft()
            if timer is not None:
                timer.cancel()
            self.items.append(frames)
            if self.joinable:
                self.unfinished += 1
            server.reply(ppid, preq, b"ok")
            self.receipts.handed(ticket, b"ok", [], ppid)

    def _serve(self, server: Server) -> None:
        while self.items and self.getters:
            gpid, greq, timer, asked = self.getters.popleft()
            if timer is not None:
                timer.cancel()
            if asked:
                self.asked.pop(asked, None)
            self._hand_out(server, gpid, greq, asked)
        if self.getters and self.loans.count:
            self._recall(server)

    def _recall(self, server: Server) -> None:
        """A get found the queue empty while consumers hold lent items: recall them (once
        a loan: see Loans.to_recall)."""
        if not self.items and self.loans.count:
            for peer in self.loans.to_recall():
                server.send(peer, [b"", RECALL])

    def _expire(self, server: Server, waiters: Union[Deque[_Waiter], Deque[_Putter]],
                entry: Union[_Waiter, Tuple[Peer, bytes]], status: bytes) -> None:
        for i, w in enumerate(waiters):
            if w[0] is entry[0] and w[1] == entry[1]:
                del waiters[i]
                server.reply(entry[0], entry[1], status)
                return

    def peer_gone(self, server: Server, peer: Peer) -> None:
        for waiters in (self.getters, self.putters):
            for w in [w for w in waiters if w[0] is peer]:
                if w[2] is not None:
                    w[2].cancel()
                waiters.remove(w)  # type: ignore[arg-type]
        self.joiners = [j for j in self.joiners if j[0] is not peer]
        self.receipts.peer_gone(server, peer)
        if peer.reset:  # it may live: a late ack of its (sent again) must find its items
            orphaned = self.loans.orphan(peer)
            if orphaned is not None:
                self._settle_later(server, orphaned, REANCHOR_WAIT_S)
            return
        key = self.loans.key_of(peer)
        back = self.loans.give_back(key) if key is not None else []
        if back:  # a consumer's lease ended with items it had not taken
            self._put_back(server, back)
