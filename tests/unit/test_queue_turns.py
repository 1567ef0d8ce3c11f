"""The order in which a queue's server serves its readers (issue 32).

The original fiber's ``SimpleQueuePush`` dealt items to its readers in strict turn (a
ZeroMQ PUSH socket pushes each reader its share ahead, into that reader's socket). Here a
reader asks for each item: readers that wait are served first come, first served (a FIFO
of waiting getters, as brokers do), and an item reaches exactly one reader, even when the
reader it was meant for has vanished. A reader that asks while items are queued gets one
at once, whatever the others do: strict turns would make it wait for a slower or absent
reader (see docs/migrating.md). Offline: a recording server stands for the hub."""

from __future__ import annotations

from typing import Any, List, Sequence, Set, Tuple

from fiber.queues._service import Get, QueueService


class _Server:
    """Records replies; the peers in ``gone`` have disconnected (reply fails)."""

    def __init__(self) -> None:
        self.replies: List[Tuple[Any, bytes, bytes, List[Any]]] = []
        self.gone: Set[str] = set()

    def reply(self, peer: Any, req_id: bytes, status: bytes, frames: Sequence[Any] = ()) -> bool:
        if peer in self.gone:
            return False
        self.replies.append((peer, req_id, status, list(frames)))
        return True


def _get(service: QueueService, server: _Server, peer: str) -> None:
    service.get(server, peer, peer.encode(), Get(None))  # type: ignore[arg-type]


def _put(service: QueueService, server: _Server, item: bytes) -> None:
    service.put(server, "writer", b"", [item])  # type: ignore[arg-type]


def test_waiting_readers_are_served_in_the_order_they_asked():
    service, server = QueueService(0, False), _Server()
    for reader in ("c", "a", "d", "b"):
        _get(service, server, reader)
    for i in range(4):
        _put(service, server, b"%d" % i)
    assert [(peer, frames) for peer, _, _, frames in server.replies] == [
        ("c", [b"0"]), ("a", [b"1"]), ("d", [b"2"]), ("b", [b"3"])]
    assert not service.items and not service.getters


def test_the_item_of_a_vanished_reader_goes_to_the_next_one_exactly_once():
    service, server = QueueService(0, False), _Server()
    for reader in ("a", "b", "c"):
        _get(service, server, reader)
    server.gone.add("a")
    _put(service, server, b"x")
    _put(service, server, b"y")
    assert [(peer, frames) for peer, _, _, frames in server.replies] == [
        ("b", [b"x"]), ("c", [b"y"])]
    assert not service.items and not service.getters


def test_a_reader_asking_while_items_are_queued_is_served_at_once():
    service, server = QueueService(0, False), _Server()
    for i in range(3):
        _put(service, server, b"%d" % i)
    _get(service, server, "fast")
    _get(service, server, "fast")
    _get(service, server, "slow")
    assert [(peer, frames) for peer, _, _, frames in server.replies] == [
        ("fast", [b"0"]), ("fast", [b"1"]), ("slow", [b"2"])]
