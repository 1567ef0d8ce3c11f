"""A request whose reply a connection's reset lost is asked again with its ticket, and
answered as it was the first time: not served twice. The protocol, its invariants and
its tests: docs/contributing/resets.md, "Receipts"."""

from __future__ import annotations

import os
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .._process_state import here
from .peers import Peer
from .serialization import Frame

__all__ = ["TICKET_BYTES", "ticket", "make_ticket", "Receipts", "SKIP", "REANCHOR_WAIT_S",
           "names_wait"]

_TICKET = struct.Struct("<8sQ")
TICKET_BYTES = _TICKET.size
#: Seconds a process whose connection was reset has to connect again before what it
#: held is let go (its locks freed, its pipes' ends closed, its answers forgotten). As
#: long as a new connection may take on a lossy link: at 10% loss and a 100 ms round
#: trip, on a loaded host, connecting again and the handshakes took 0.7 to 4.1 s (a lost
#: SYN is sent again after 1 s, then 3 s), and 5 s was sometimes too short.
REANCHOR_WAIT_S = 15.0
# Each thread's tickets' key and count: ``here.transport.tickets`` (a thread-local).


def ticket() -> bytes:
    """The next ticket of this thread (`TICKET_BYTES` long)."""
    local = here.transport.tickets
    try:
        local.count += 1
    except AttributeError:  # this thread's first (a forked child starts anew: below)
        local.key, local.count = os.urandom(8), 1
    return _TICKET.pack(local.key, local.count)


def _new_keys_in_child() -> None:
    """A forked child is another caller: its forking thread's key is not its own."""
    here.transport.tickets.__dict__.clear()


here.after_fork_in_child(_new_keys_in_child)


def make_ticket(key: bytes, count: int) -> bytes:
    """The ``count``-th ticket of the caller ``key`` (8 bytes: a caller that makes one
    call at a time; see `ticket`)."""
    return _TICKET.pack(key, count)


def names_wait(waiting: Peer, asked: bytes, peer: Peer, named: bytes) -> bool:
    """Whether a withdraw of request ``named`` (`fiber.transport.client.Cancel`) that
    came from ``peer`` names the request ``asked`` that waits at a service for
    ``waiting``: the same request on the same connection; or, for a ticket, from the
    same process on any connection. A wait whose connection was reset stays with that
    connection's peer while its caller asks again on a new one (`Receipts.again` sends
    the answer there), and the caller's withdraw comes on the new one too; a request
    id without a ticket is a count of one connection's requests only."""
    if asked != named:
        return False
    return waiting is peer or (len(asked) == TICKET_BYTES
                               and waiting.process_id == peer.process_id)


Answer = Tuple[bytes, Sequence[Frame]]
#: `Receipts.again`'s "nothing to send": the request is being served and its answer
#: will go to the asking connection, or it is an older connection's copy of a request
#: asked again already. Compared by identity.
SKIP: Answer = (b"", [])


#: Seconds at most an answer is kept for a caller whose connection was reset while its
#: process lives (it may take that long to connect again: `RESET_RETRIES` connections,
#: each up to the heartbeat's grace). Its next call, or its process's end, forgets it
#: sooner.
KEPT_ANSWER_S = 300.0


class _Entry:
    __slots__ = ("ticket", "answer", "peer", "since", "undo")

    def __init__(self, asked: bytes, answer: Optional[Answer], peer: Peer) -> None:
        self.ticket = asked
        self.answer = answer  # None while it is served
        self.peer = peer  # where the answer goes (went)
        self.since = time.monotonic()  # when it was asked, then answered
        #: What undoes the answer, while it waits for its caller, written to no
        #: connection (see `Receipts.if_unclaimed`).
        self.undo: Optional[Callable[[], None]] = None


class Receipts:
    """The last request of each caller on a TCP connection, and its answer once given
    (under the server's lock)."""

    def __init__(self) -> None:
        self._last: Dict[bytes, _Entry] = {}

    def __len__(self) -> int:
        return len(self._last)

    def again(self, asked: bytes, peer: Peer) -> Optional[Answer]:
        """What to do with request ``asked`` (a ticket, or b"": none) from ``peer``:
        None, serve it; `SKIP`, nothing (it is being served, and its answer will go to
        ``peer``; or this is an older connection's copy of a request asked again); or
        the answer to send ``peer`` again. A newer ticket forgets its caller's last
        answer (it arrived)."""
        if not asked:
            return None
        key = asked[:8]
        last = self._last.get(key)
        if last is None:
            return None
        if last.ticket != asked:
            del self._last[key]
            _undo(last)  # (an answer it never got: it gave up between connections)
            return None
        if peer.peer_id < last.peer.peer_id:
            return SKIP
        last.peer, last.undo = peer, None
        return SKIP if last.answer is None else last.answer

    def handed(self, asked: bytes, status: bytes, frames: Sequence[Frame], peer: Peer) -> None:
        """``frames`` were sent to ``peer`` as the answer to ``asked``: kept (a queue's
        ``get``, whose request is not recorded while it waits: its wait is dropped
        with its connection)."""
        if asked and peer.may_reset:
            self._last[asked[:8]] = _Entry(asked, (status, frames), peer)

    def serving(self, asked: bytes, peer: Peer) -> None:
        """Request ``asked`` from ``peer`` is being served, and will be answered even if
        its connection ends (``Service.answers_again``)."""
        if peer.may_reset:
            self._last[asked[:8]] = _Entry(asked, None, peer)

    def answered(self, asked: bytes, status: bytes, frames: Sequence[Frame],
                 peer: Peer) -> Tuple[Peer, bool]:
        """``asked``, being served for ``peer``, is answered (``status``, ``frames``):
        the answer is kept. Returns the connection to send it to (``peer``, or the one
        that asked again meanwhile), and whether the answer waits there for its caller
        to ask again (that connection was reset: a send to it fails, yet the answer is
        as good as given)."""
        last = self._last.get(asked[:8])
        if last is None or last.ticket != asked:
            return peer, False
        last.answer, last.since = (status, frames), time.monotonic()
        return last.peer, last.peer.reset

    def if_unclaimed(self, asked: bytes, undo: Callable[[], None]) -> None:
        """``asked`` was just answered (a lock granted to a wait) while its caller is
        between connections: the answer waits for it, written to no connection. If the
        caller never asks for it (it gave up: its thread interrupted, or resets past
        `RESET_RETRIES`; its next request shows it, as does its process's end or
        `KEPT_ANSWER_S`), ``undo()`` runs (the lock is released), not to leave what it
        grants to nobody."""
        last = self._last.get(asked[:8])
        if (last is not None and last.ticket == asked and last.answer is not None
                and last.peer.reset):
            last.undo = undo

    def keeps_waiting(self, server: Any, asked: bytes, peer: Peer,
                      drop: Callable[[], None]) -> bool:
        """Whether request ``asked``, which waits to be answered (a lock's ``acquire``)
        and whose connection (``peer``) ended, is still to be answered: its caller asked
        again on another connection, or may (``peer``'s was reset). If not, it is
        forgotten: it never will be. A wait kept for a reset connection whose caller
        does not ask again within ``REANCHOR_WAIT_S`` (it gave up, or its process is
        gone) is forgotten then, and ``drop()`` drops it from its service: answered
        later, it would be given to nobody (a lock granted to a thread that raised)."""
        key = asked[:8]
        last = self._last.get(key) if len(asked) == TICKET_BYTES else None
        if last is None or last.ticket != asked:
            return False
        if last.peer is not peer:
            return True
        if not peer.reset:
            del self._last[key]
            return False

        def unclaimed() -> None:
            if self._last.get(key) is last and last.peer is peer and last.answer is None:
                del self._last[key]
                drop()

        server.call_later(REANCHOR_WAIT_S, unclaimed)
        return True

    def forget(self, asked: bytes) -> None:
        """Request ``asked`` waited and will not be answered (its process is gone)."""
        last = self._last.get(asked[:8])
        if last is not None and last.ticket == asked and last.answer is None:
            del self._last[asked[:8]]

    def revoke(self, asked: bytes) -> None:
        """The answer to ``asked`` no longer holds (a lock granted to a process since
        counted gone, and freed): asked again, the request is served anew."""
        last = self._last.get(asked[:8])
        if last is not None and last.ticket == asked:
            del self._last[asked[:8]]

    def peer_gone(self, server: Any, peer: Peer) -> None:
        """``peer``'s connection ended: its callers' answers are forgotten, at once or,
        after a reset, once they had the time to ask again. A request still being served
        is kept until it is answered and that time has passed."""
        keys = [key for key, last in self._last.items() if last.peer is peer]
        if not keys:
            return
        if not peer.reset:
            for key in [k for k in keys if self._last[k].answer is not None]:
                _undo(self._last.pop(key))
            keys = [k for k in keys if k in self._last]
        if keys:
            self._later(server, keys, peer)

    def _later(self, server: Any, keys: List[bytes], peer: Peer) -> None:
        server.call_later(REANCHOR_WAIT_S, lambda: self._forget(server, keys, peer))

    def _forget(self, server: Any, keys: List[bytes], peer: Peer) -> None:
        """After a reset: answers not asked for again are forgotten once their caller's
        process is gone (it did not anchor again), or after `KEPT_ANSWER_S`; until then
        it may still ask (connecting again can take longer than ``REANCHOR_WAIT_S``),
        and an answer forgotten too soon would have its request served twice."""
        kept = []
        alive = peer.reset and server.process_alive(peer.process_id)  # (a clean end: gone)
        now = time.monotonic()
        for key in keys:
            last = self._last.get(key)
            if last is not None and last.peer is peer:
                if last.answer is None or (alive and now - last.since < KEPT_ANSWER_S):
                    kept.append(key)  # still served, or its caller may still ask
                else:
                    _undo(self._last.pop(key))
        if kept:
            self._later(server, kept, peer)


def _undo(entry: _Entry) -> None:
    """Undo an answer its caller never got (see `Receipts.if_unclaimed`)."""
    undo, entry.undo = entry.undo, None
    if undo is not None:
        undo()
