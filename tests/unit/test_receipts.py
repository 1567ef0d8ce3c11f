"""A request asked again after its connection's reset is answered once (issue 30,
`fiber.transport.receipts`): a real server and real TCP connections on 127.0.0.1, the
reset made by closing a client's socket with ``SO_LINGER`` 0 (the kernel sends RST)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any, List

import pytest

from fiber._core._served import encode_wait
from fiber._process_state import here
from fiber.errors import LockLostError
from fiber.queues._service import Get, QueueOps, QueueService
from fiber.synchronize._primitives import LockOps, LockService, SemaphoreOps, SemaphoreService
from fiber.transport import client as client_module
from fiber.transport import receipts
from fiber.transport import server as server_module
from fiber.transport.client import Client
from fiber.transport.remote import unpack_exception
from fiber.transport.serialization import loads
from fiber.transport.server import Server, Service
from fiber.transport.sockets import split_address


class _Slow(Service):
    """Counts the requests it serves; answers each 0.3 s later, from another thread, with
    the count (as a manager's object answers from a worker thread)."""

    answers_again = True

    def __init__(self) -> None:
        self.served = 0

    def handle(self, server: Server, peer: Any, op: bytes, req_id: bytes,
               payload: List[Any]) -> None:
        self.served += 1
        count = self.served

        def answer() -> None:
            time.sleep(0.3)
            with server.lock:
                server.reply(peer, req_id, b"ok", [str(count).encode()])

        threading.Thread(target=answer, daemon=True).start()


class _Dropping(_Slow):
    answers_again = False


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A server, reached over TCP only (as a process on another host reaches it: a Unix
    socket is never reset, and gets no receipts)."""
    monkeypatch.setattr(client_module, "connect", lambda address, timeout, unix=True:
                        socket.create_connection(split_address(address), timeout))
    srv = Server("127.0.0.1", name="fiber-test-receipts")
    yield srv
    srv.close()


def _reset(c: Client) -> None:
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    c.close()


def _ask_then_reset(srv: Server, name: bytes, asked: bytes) -> None:
    first = Client(srv.address, timeout=10)
    first.send_message([name, b"op", asked])
    time.sleep(0.05)  # it reached the server, whose answer is on its way
    _reset(first)


def test_a_request_asked_again_while_served_is_answered_once_on_the_new_connection(server):
    service = _Slow()
    server.register(b"slow", service)
    asked = receipts.ticket()
    _ask_then_reset(server, b"slow", asked)
    again = Client(server.address, timeout=10)
    assert again.request(b"slow", b"op", ticket=asked, timeout=10) == (b"ok", [b"1"])
    assert service.served == 1
    # asked once more (its answer lost again): the same answer, not a second run
    _reset(again)
    third = Client(server.address, timeout=10)
    assert third.request(b"slow", b"op", ticket=asked, timeout=10) == (b"ok", [b"1"])
    # the caller's next request is a new one: served
    assert third.request(b"slow", b"op", ticket=receipts.ticket(), timeout=10) == (
        b"ok", [b"2"])
    assert service.served == 2
    third.close()


def test_a_request_asked_again_after_its_object_was_dropped_gets_its_kept_answer(server):
    """The reset took long enough for the object's holder to be counted gone, and the
    object was dropped (a manager's object, its pool terminated): the request asked again
    still gets its kept answer, not a "no fiber object" error that went to the old
    connection and left the caller waiting for ever."""
    service = _Slow()
    server.register(b"slow", service)
    asked = receipts.ticket()
    _ask_then_reset(server, b"slow", asked)  # served (its answer kept), connection reset
    time.sleep(0.5)  # the answer was made
    server.unregister(b"slow")  # dropped, as ObjectService.process_gone drops it
    again = Client(server.address, timeout=10)
    assert again.request(b"slow", b"op", ticket=asked, timeout=10) == (b"ok", [b"1"])
    status, payload = again.request(b"slow", b"op", ticket=receipts.ticket(), timeout=10)
    assert status == b"err"  # a new request: the object is gone
    again.close()


def test_answers_are_forgotten_when_their_connection_ends_cleanly(server):
    """A connection closed cleanly (its process closed it or ended) asks nothing again:
    its callers' answers are dropped at once, not kept."""
    service = _Slow()
    server.register(b"slow", service)
    c = Client(server.address, timeout=10)
    assert c.request(b"slow", b"op", ticket=receipts.ticket(), timeout=10)[0] == b"ok"
    assert len(server.receipts) == 1
    c.close()
    deadline = time.monotonic() + 10
    while len(server.receipts) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(server.receipts) == 0


def test_a_service_that_does_not_answer_again_serves_a_ticket_twice(server):
    """Receipts are the service's choice (``answers_again``): without it, a request with
    a ticket is an ordinary request (the server keeps nothing)."""
    service = _Dropping()
    server.register(b"dropping", service)
    asked = receipts.ticket()
    _ask_then_reset(server, b"dropping", asked)
    again = Client(server.address, timeout=10)
    assert again.request(b"dropping", b"op", ticket=asked, timeout=10)[0] == b"ok"
    assert service.served == 2 and len(server.receipts) == 0
    again.close()


def _lock_on(srv: Server, monkeypatch: pytest.MonkeyPatch) -> Client:
    """A fiber lock served by ``srv`` (``b"lock"``), held by thread ``A`` of this process,
    whose anchor keeps it alive at the server; ``REANCHOR_WAIT_S`` made short."""
    monkeypatch.setattr(receipts, "REANCHOR_WAIT_S", 0.3)
    srv.register(b"lock", LockService(recursive=False))
    anchor = Client(srv.address, timeout=10, anchor=True)
    assert _acquire(anchor, b"A", receipts.ticket()) == (b"ok", [])
    return anchor


def _acquire(c: Client, thread: bytes, asked: bytes, timeout: float = 10) -> Any:
    return c.request(b"lock", LockOps.ACQUIRE, [thread, encode_wait(True, None)],
                     ticket=asked, timeout=timeout)


def _park(srv: Server, thread: bytes, asked: bytes) -> Client:
    c = Client(srv.address, timeout=10)
    c.send_message([b"lock", LockOps.ACQUIRE, asked, thread, encode_wait(True, None)])
    time.sleep(0.1)  # parked at the server
    return c


def test_a_grant_kept_for_a_caller_between_connections_outlives_the_reanchor_wait(
        server, monkeypatch):
    """A lock granted to a waiter whose connection was reset waits for it to ask again
    (the grant stands), also past ``REANCHOR_WAIT_S`` while its process lives:
    connecting again can take longer. Forgotten then, as before, the request asked
    again was served anew: the lock, already its own, made it wait for itself."""
    anchor = _lock_on(server, monkeypatch)
    asked = receipts.ticket()
    _reset(_park(server, b"B", asked))
    time.sleep(0.1)  # the server saw the reset
    assert anchor.request(b"lock", LockOps.RELEASE, [b"A"], timeout=10)[0] == b"ok"
    time.sleep(1.0)  # three REANCHOR_WAIT_S
    again = Client(server.address, timeout=10)
    assert _acquire(again, b"B", asked, timeout=3) == (b"ok", [])
    again.close()
    anchor.close()


def test_a_grant_kept_for_a_caller_that_gave_up_is_given_back_at_its_next_request(
        server, monkeypatch):
    """A lock granted to a waiter between connections waits for it (above); if the
    caller gave up instead of asking again (its thread interrupted, or reset too often),
    its next request, with a newer ticket, shows it: the lock is released for the next
    waiter. Before, the thread that gave up held it until its process ended."""
    anchor = _lock_on(server, monkeypatch)
    _reset(_park(server, b"B", receipts.ticket()))
    time.sleep(0.1)  # the server saw the reset
    assert anchor.request(b"lock", LockOps.RELEASE, [b"A"], timeout=10)[0] == b"ok"
    assert not _holds(anchor, b"C")  # (granted to B, kept for it)
    again = Client(server.address, timeout=10)
    assert again.request(b"lock", LockOps.OWNED, [b"B"], ticket=receipts.ticket(),
                         timeout=10) == (b"no", [])  # gave up: its next request
    assert again.request(b"lock", LockOps.ACQUIRE, [b"C", encode_wait(False, None)],
                         timeout=10) == (b"ok", [])
    again.close()
    anchor.close()


def test_a_wait_kept_after_a_reset_and_not_asked_again_is_dropped(server, monkeypatch):
    """A wait whose connection was reset and whose caller does not ask again within
    ``REANCHOR_WAIT_S`` (it gave up while its process lives) is dropped: the lock goes
    to the next waiter. Kept, it was granted to nobody, and the next waiter waited for
    ever."""
    anchor = _lock_on(server, monkeypatch)
    _reset(_park(server, b"B", receipts.ticket()))
    other = _park(server, b"C", struct.pack("<Q", 1))  # an ordinary request
    time.sleep(1.0)  # three REANCHOR_WAIT_S
    assert anchor.request(b"lock", LockOps.RELEASE, [b"A"], timeout=10)[0] == b"ok"
    status = other.receive(3)
    assert status is not None and bytes(status[1]) == b"ok", status
    other.close()
    anchor.close()


def _cut_off(srv: Server, name: bytes, op: bytes, payload: List[Any]) -> None:
    """``op`` sent as a request; the connection reset once the server answered."""
    first = Client(srv.address, timeout=10)
    first.send_message([name, op, struct.pack("<Q", 1), *payload])
    time.sleep(0.05)  # served: its answer is on its way
    _reset(first)


def test_a_task_done_asked_again_after_a_reset_counts_once(server):
    """A JoinableQueue's ``task_done`` whose reply a reset cut off is asked again with
    its ticket: answered, not counted twice (which would let ``join`` return early, or
    raise "called too many times")."""
    service = QueueService(maxsize=0, joinable=True)
    server.register(b"q", service)
    service.unfinished = 2
    asked = receipts.ticket()
    _cut_off(server, b"q", QueueOps.TASK_DONE, [asked])
    again = Client(server.address, timeout=10)
    assert again.request(b"q", QueueOps.TASK_DONE, [asked], timeout=10) == (b"ok", [])
    assert service.unfinished == 1
    again.close()


def test_a_bounded_put_asked_again_after_a_reset_is_put_once(server):
    """A bounded queue's ``put``, admitted and its reply cut off by a reset, asked again
    with its ticket: the item is in the queue once."""
    service = QueueService(maxsize=5, joinable=False)
    server.register(b"q", service)
    asked = receipts.ticket()
    item = [encode_wait(True, None), asked, b"item"]
    _cut_off(server, b"q", QueueOps.PUT_WAIT, item)
    again = Client(server.address, timeout=10)
    assert again.request(b"q", QueueOps.PUT_WAIT, item, timeout=10) == (b"ok", [])
    assert len(service.items) == 1
    again.close()



@pytest.mark.parametrize("old_copy_last", [False, True], ids=["in-order", "old-copy-last"])
def test_a_get_asked_again_while_its_first_copy_waits_gets_the_item(server, old_copy_last):
    """A queue's ``get`` parked at the hub, whose connection failed on the caller's side
    only (the hub sees it open: here, it is simply no longer read), is asked again with
    its ticket on a new connection: the item put next goes to the new one. It went to the
    first copy, first in line, into a connection nobody read, and the caller waited. The
    first copy may also be read after the second (``old_copy_last``): it is dropped."""
    service = QueueService(maxsize=0, joinable=False)
    server.register(b"q", service)
    asked = receipts.ticket()
    get = [b"q", QueueOps.GET, struct.pack("<Q", 1), *Get(None, asked).frames()]
    first = Client(server.address, timeout=10)
    again = Client(server.address, timeout=10)  # (a newer connection)
    for c in ((again, first) if old_copy_last else (first, again)):
        c.send_message(get)
        time.sleep(0.1)  # it reached the hub
    assert len(service.getters) == 1
    putter = Client(server.address, timeout=10)
    putter.send_message([b"q", QueueOps.PUT, b"", b"item"])
    reply = again.receive(5)
    assert reply is not None and bytes(reply[-1]) == b"item", reply
    assert not service.getters and not service.items
    for c in (first, again, putter):
        c.close()


def _of_process(srv: Server, process: bytes, monkeypatch: pytest.MonkeyPatch) -> Client:
    """An anchor that says it is process ``process`` (another process than this one, to
    the server: its end can make that process gone while this one's anchor lives)."""
    with monkeypatch.context() as m:
        m.setattr(here.transport, "process_id", process)
        return Client(srv.address, timeout=10, anchor=True)


def _release(c: Client, thread: bytes, asked: bytes) -> Any:
    return c.request(b"lock", LockOps.RELEASE, [thread], ticket=asked, timeout=10)


def _holds(c: Client, thread: bytes) -> bool:
    return bool(c.request(b"lock", LockOps.OWNED, [thread], timeout=10)[0] == b"ok")


def _counted_gone(srv: Server, anchor: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    """``anchor`` reset; its process does not anchor again within ``REANCHOR_WAIT_S``
    (made short), so the server counts it gone."""
    monkeypatch.setattr(server_module, "REANCHOR_WAIT_S", 0.3)
    monkeypatch.setattr(receipts, "REANCHOR_WAIT_S", 0.3)
    _reset(anchor)
    time.sleep(1.0)


def test_a_holder_counted_gone_that_lives_is_told_so_and_frees_no_other_holder(
        server, monkeypatch):
    """A process holding a lock is counted gone (its connection reset, and it did not
    connect again in time), so its lock goes to the next waiter. When it comes back and
    releases, it gets `LockLostError`, and the lock stays the new holder's: before, its
    release freed the lock that was now another's (two holders, silently)."""
    anchor = _lock_on(server, monkeypatch)
    assert _release(anchor, b"A", receipts.ticket()) == (b"ok", [])
    holder = _of_process(server, b"P" * 16, monkeypatch)
    assert _acquire(holder, b"H", receipts.ticket()) == (b"ok", [])
    _counted_gone(server, holder, monkeypatch)
    assert _acquire(anchor, b"B", receipts.ticket(), timeout=3) == (b"ok", [])
    back = _of_process(server, b"P" * 16, monkeypatch)
    status, payload = _release(back, b"H", receipts.ticket())
    assert status == b"err"
    error = unpack_exception(loads(payload))
    assert isinstance(error, LockLostError) and "taken from this thread" in str(error)
    assert _holds(anchor, b"B")
    # said once: its next call is an ordinary one (B holds the lock)
    assert back.request(b"lock", LockOps.ACQUIRE, [b"H", encode_wait(False, None)],
                        ticket=receipts.ticket(), timeout=10) == (b"no", [])
    back.close()
    anchor.close()


def test_a_process_counted_gone_while_it_lives_loses_its_open_connections_too(
        server, monkeypatch):
    """A process counted gone (its anchor reset, not made again in time) whose thread
    waits for the lock on another connection, still open: that connection is closed
    with it, so the thread's call fails (ConnectionLost: it asks again on a new one).
    Its wait was dropped with the process, and the open connection left the thread
    waiting for an answer that could not come."""
    anchor = _lock_on(server, monkeypatch)
    gone = _of_process(server, b"P" * 16, monkeypatch)
    with monkeypatch.context() as m:
        m.setattr(here.transport, "process_id", b"P" * 16)
        waiter = Client(server.address, timeout=10)
    waiter.send_message([b"lock", LockOps.ACQUIRE, receipts.ticket(), b"W",
                         encode_wait(True, None)])
    time.sleep(0.1)  # parked at the server
    _counted_gone(server, gone, monkeypatch)
    assert _release(anchor, b"A", receipts.ticket()) == (b"ok", [])
    with pytest.raises(client_module.ConnectionLost):
        waiter.receive(5)
    assert not _holds(anchor, b"W")  # and the lock was not given to the gone waiter
    anchor.close()


def test_a_grant_asked_again_after_its_connection_timed_out_is_the_lock(server,
                                                                         monkeypatch):
    """A lock granted to a parked acquire whose connection then ends by a timeout
    (ETIMEDOUT: a clean end to the server, which keeps no answers for it), while the
    caller's process lives and asks again with the same ticket: it is answered that it
    holds the lock. Served anew, the request waited behind its own thread, for ever."""
    anchor = _lock_on(server, monkeypatch)
    asked = receipts.ticket()
    waiter = _park(server, b"B", asked)
    assert _release(anchor, b"A", receipts.ticket()) == (b"ok", [])  # granted to B
    time.sleep(0.1)
    with server.lock:  # its connection timed out: what the server's read does then
        conn = next(c for c in server._conns.values()
                    if c.peer is not None and c.peer.peer_id == waiter.peer_id)
        assert not conn.peer.reset
        server._close_conn(conn)
    assert _acquire(anchor, b"B", asked, timeout=5) == (b"ok", [])  # asked again
    assert _holds(anchor, b"B")
    assert _release(anchor, b"B", receipts.ticket()) == (b"ok", [])  # held once
    assert _acquire(anchor, b"C", receipts.ticket(), timeout=5) == (b"ok", [])
    waiter.close()
    anchor.close()


def test_a_release_asked_again_after_its_process_was_counted_gone_is_made_once(
        server, monkeypatch):
    """A release made, its answer cut off by a reset, and its process counted gone
    before it asked again (which forgets the answers kept for it): asked again, it is
    answered and not made again. Made again, it freed the lock of the next holder."""
    anchor = _lock_on(server, monkeypatch)
    assert _release(anchor, b"A", receipts.ticket()) == (b"ok", [])
    holder = _of_process(server, b"R" * 16, monkeypatch)
    assert _acquire(holder, b"H", receipts.ticket()) == (b"ok", [])
    waiter = _park(server, b"W", receipts.ticket())  # gets the lock at H's release
    asked = receipts.ticket()
    holder.send_message([b"lock", LockOps.RELEASE, asked, b"H"])
    time.sleep(0.1)  # released: the lock is W's, the answer on its way
    _counted_gone(server, holder, monkeypatch)
    back = _of_process(server, b"R" * 16, monkeypatch)
    assert _release(back, b"H", asked) == (b"ok", [])
    assert _holds(anchor, b"W")
    back.close()
    waiter.close()
    anchor.close()


def test_a_semaphore_release_asked_again_after_its_process_was_counted_gone_counts_once(
        server, monkeypatch):
    """The same for a semaphore: its release, asked again after the process that made
    it was counted gone, is answered and not counted a second time."""
    service = SemaphoreService(0, None)
    server.register(b"sem", service)
    releaser = _of_process(server, b"S" * 16, monkeypatch)
    asked = receipts.ticket()
    releaser.send_message([b"sem", SemaphoreOps.RELEASE, asked])
    time.sleep(0.1)  # counted: its answer on its way
    _counted_gone(server, releaser, monkeypatch)
    back = _of_process(server, b"S" * 16, monkeypatch)
    assert back.request(b"sem", SemaphoreOps.RELEASE, [], ticket=asked, timeout=10) == (
        b"ok", [])
    assert service.value == 1
    # its next release is a new one
    assert back.request(b"sem", SemaphoreOps.RELEASE, [], ticket=receipts.ticket(),
                        timeout=10) == (b"ok", [])
    assert service.value == 2
    back.close()


def test_a_semaphore_unit_kept_for_a_caller_that_gave_up_comes_back(server, monkeypatch):
    """The same for a semaphore's unit: given to a waiter between connections that gave
    up, it is counted back at the caller's next request."""
    monkeypatch.setattr(receipts, "REANCHOR_WAIT_S", 0.3)
    service = SemaphoreService(0, None)
    server.register(b"sem", service)
    anchor = Client(server.address, timeout=10, anchor=True)
    waiting = Client(server.address, timeout=10)
    waiting.send_message([b"sem", SemaphoreOps.ACQUIRE, receipts.ticket(),
                          encode_wait(True, None)])
    time.sleep(0.1)  # parked
    _reset(waiting)
    time.sleep(0.1)
    assert anchor.request(b"sem", SemaphoreOps.RELEASE, [], timeout=10) == (b"ok", [])
    assert service.value == 0  # the unit is the waiter's, kept for it
    assert anchor.request(b"sem", SemaphoreOps.VALUE, [], ticket=receipts.ticket(),
                          timeout=10)[0] == b"ok"  # its caller's next request
    assert service.value == 1
    anchor.close()
