"""Lent items that come back to a queue go back to their places (fiber.queues._items).

A CI run lost seven items of a queue read by three processes that each stop at a
sentinel: one reader's lent items came back to the very front after another's, which
had been put after them, the sentinels among them. Here the hub's side is driven as the
run drove it, offline: a recording server stands for the hub (as in test_queue_turns),
the leases and readers are named peers. tests/backends/local/test_queue_lending_local.py runs
the readers themselves.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

from fiber.queues._items import QueueItems
from fiber.queues._lending import LeaseItems, LeaseKey, Pull, unpack_loan
from fiber.queues._service import Get, QueueService

N = b"sentinel"


class _Peer:
    def __init__(self, name: str) -> None:
        self.name, self.process_id, self.reset = name, name.encode(), False

    def __repr__(self) -> str:
        return self.name


class _Server:
    """Records replies and pushes."""

    def __init__(self) -> None:
        self.replies: List[Tuple[Any, bytes, List[Any]]] = []
        self.pushed: List[Tuple[Any, List[Any]]] = []

    def reply(self, peer: Any, req_id: bytes, status: bytes, frames: Sequence[Any] = ()) -> bool:
        self.replies.append((peer, status, list(frames)))
        return True

    def send(self, peer: Any, frames: List[Any]) -> bool:
        self.pushed.append((peer, frames))
        return True


def _put(service: QueueService, server: _Server, item: bytes) -> None:
    service.put(server, _Peer("writer"), b"", [item])  # type: ignore[arg-type]


def _get(service: QueueService, server: _Server, peer: _Peer) -> Tuple[bytes, List[Any]]:
    before = len(server.replies)
    service.get(server, peer, b"g", Get(None))  # type: ignore[arg-type]
    assert len(server.replies) == before + 1, "the get was not answered at once"
    _, status, frames = server.replies[-1]
    return status, frames


def _pull(service: QueueService, server: _Server, lease: _Peer, n: int = 16
          ) -> Tuple[bytes, List[Tuple[int, List[Any]]]]:
    service.pull(server, lease, b"p", Pull(n, lease.process_id))  # type: ignore[arg-type]
    _, status, frames = server.replies[-1]
    return status, unpack_loan(frames)


def test_items_given_back_later_keep_their_place_ahead_of_later_ones():
    """The CI run's order of events: B holds 0..9 lent; the sentinels are put; A gets
    one and pulls the other two; C's get finds the queue empty and recalls both; B gives
    back what it held, then A (at its end) what it held. B's and C's next gets must take
    0..9 before the sentinels: items put first come first."""
    service, server = QueueService(0, False), _Server()
    lease_a, lease_b, reader_a, reader_b, reader_c = (
        _Peer(n) for n in ("lease-a", "lease-b", "reader-a", "reader-b", "reader-c"))
    for i in range(10):
        _put(service, server, b"%d" % i)
    _, lent_b = _pull(service, server, lease_b)
    assert [f for _, (f,) in lent_b] == [b"%d" % i for i in range(10)]
    for _ in range(3):
        _put(service, server, N)
    assert _get(service, server, reader_a)[1] == [N]
    _, lent_a = _pull(service, server, lease_a)
    assert [f for _, (f,) in lent_a] == [N, N]
    service.get(server, reader_c, b"c", Get(None))  # type: ignore[arg-type]
    assert {peer for peer, _ in server.pushed} == {lease_a, lease_b}  # both recalled
    service.give_back(server, lease_b, b"r",  # type: ignore[arg-type]
                      LeaseItems(lease_b.process_id, [s for s, _ in lent_b]))
    assert server.replies[-1] == (lease_b, b"ok", [])  # B's next get waits for this
    assert server.replies[-2][0] is reader_c and server.replies[-2][2] == [b"0"]
    service.settle(server, lease_a, b"", LeaseKey(lease_a.process_id))  # type: ignore[arg-type]
    got = [_get(service, server, (reader_b, reader_c)[i % 2])[1][0] for i in range(11)]
    assert got == [b"%d" % i for i in range(1, 10)] + [N, N]
    assert not service.items and not service.loans.count


def test_nothing_is_lent_while_items_given_back_wait():
    """Items that came back go to gets alone (a lease could hold them past its consumer's
    last get), and a get is not told to pull meanwhile; lending resumes once they are
    gone."""
    service, server = QueueService(0, False), _Server()
    lease, reader = _Peer("lease"), _Peer("reader")
    for i in range(6):
        _put(service, server, b"%d" % i)
    _, lent = _pull(service, server, lease, n=2)
    service.give_back(server, lease, b"",  # type: ignore[arg-type]
                      LeaseItems(lease.process_id, [s for s, _ in lent]))
    status, loan = _pull(service, server, lease)
    assert (status, loan) == (b"ok", [])
    assert _get(service, server, reader) == (b"ok", [b"0"])
    assert _get(service, server, reader) == (b"more", [b"1"])  # the last one back
    status, loan = _pull(service, server, lease)
    assert [f for _, (f,) in loan] == [b"2", b"3", b"4", b"5"]


def test_queue_items_keep_put_order_across_give_backs():
    items = QueueItems()
    for i in range(8):
        items.append([i])
    taken = [items.take() for _ in range(6)]  # 0..5 out
    items.give_back([taken[4], taken[1]])  # two consumers, out of order
    items.give_back([taken[3]])
    items.push_first(["unget"])
    assert len(items) == 6 and not items.lendable()
    assert [items.take()[1][0] for _ in range(6)] == ["unget", 1, 3, 4, 6, 7]
    assert not items
