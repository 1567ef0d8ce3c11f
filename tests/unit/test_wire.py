"""The wire: message framing, the pool protocol, and the operations of every protocol.

Framing and the pool's batches are checked byte for byte through real sockets (a
socketpair) and against their documented layout; every service's operation table against
the operations its protocol names, so that a name sent by a client is always handled.
"""

from __future__ import annotations

import inspect
import pickle
import socket
import struct
import threading
from typing import Any, Iterator, List

import pytest

from fiber._core._parking import Parking
from fiber._core._served import Count, Wait, encode_wait
from fiber._core._shared import Get, Holder, SharedOps, SharedStore
from fiber.backends.local._forkserver import ForkServer
from fiber.backends.local._forkserver_protocol import ForkOps
from fiber.connection._pipe import End, Handoff, Message, PipeOps, PipeService, Receive, Send
from fiber.connection._watch import Ready, WaitAny, WaitOps, WaitService
from fiber.managers._protocol import Call, Create, Created, ManagerOps, ObjectOps, ProxyHandoff
from fiber.managers._server import ManagerService, ObjectService
from fiber.pool._dispatch import Dispatching
from fiber.pool._jobs import JobsOfSeveral
from fiber.pool._protocol import (
    FUNCTION_SLOTS,
    InitFailed,
    Kept,
    PoolOps,
    Replacement,
    Resume,
    ResumeJob,
    Retiring,
    WorkerEnded,
    WorkerHello,
    pack_results,
    pack_results_of,
    pack_tasks,
    pack_to,
    results_busy,
    split_results,
    unpack_results,
    unpack_results_of,
    unpack_tasks,
)
from fiber.pool._reconnect import Reconnections
from fiber.pool._service import PoolService
from fiber.process._inspected import (
    AskStack,
    Hello,
    InspectOps,
    InspectService,
    Stack,
    Stats,
    Watching,
)
from fiber.process._launcher import (
    ExitReport,
    Fetch,
    JobToken,
    LaunchOps,
    LaunchService,
    Output,
    Source,
    SourceText,
)
from fiber.queues._lending import LeaseItems, LeaseKey, Pull, pack_loan, unpack_loan
from fiber.queues._service import Get as QueueGet  # (the shared store has a Get too)
from fiber.queues._service import PutWait, QueueOps, QueueService, TaskDone, Withdraw
from fiber.sharedctypes import (
    Access,
    Assign,
    AssignItem,
    Attribute,
    Item,
    ValueOps,
    ValueService,
)
from fiber.synchronize._barrier import BarrierOps, BarrierService
from fiber.synchronize._condition import ConditionOps, ConditionService, Notify, Sleep, Ticket
from fiber.synchronize._event import EventOps, EventService
from fiber.synchronize._primitives import (
    Acquire,
    AcquireRestore,
    Caller,
    LockOps,
    LockService,
    SemaphoreOps,
    SemaphoreService,
    ThreadingLockService,
)
from fiber.transport._resend import Counted, CountOf, EndedPeers, ResendOps
from fiber.transport.client import Cancel, Client
from fiber.transport.framing import MAX_FRAMES, FrameReader, ProtocolError, send_frames
from fiber.transport.operations import Dispatcher, MalformedReply, handles, names, reply_of
from fiber.transport.remote import unpack_exception
from fiber.transport.serialization import dumps, loads
from fiber.transport.server import Server, Service

# -- framing -------------------------------------------------------------------------------


@pytest.fixture
def pair() -> Iterator[List[socket.socket]]:
    a, b = socket.socketpair()
    yield [a, b]
    a.close()
    b.close()


def _read(sock: socket.socket, count: int, reader: FrameReader) -> List[List[bytes]]:
    while len(reader.messages) < count:
        assert reader.feed_from(sock), "end of stream before the messages"
    return [[bytes(f) for f in reader.messages.popleft()] for _ in range(count)]


def test_a_message_is_a_count_then_lengths_then_frames(pair):
    a, b = pair
    send_frames(a, [b"ab", b"", b"cde"], unix=False)
    raw = b.recv(1024)
    assert raw == struct.pack("<I3Q", 3, 2, 0, 3) + b"abcde"


def test_messages_keep_their_frames_and_order(pair):
    a, b = pair
    sent = [[b"x"], [b"", b""], [b"service", b"op", b"\x00" * 8, bytes(range(256))],
            [b"y" * 70_000, b"z"]]
    for frames in sent:
        send_frames(a, frames, unix=False)
    assert _read(b, len(sent), FrameReader()) == sent


def test_a_message_read_a_byte_at_a_time_arrives_whole(pair):
    a, b = pair
    frames = [b"head", b"q" * 1000]
    wire = struct.pack("<I2Q", 2, 4, 1000) + b"head" + b"q" * 1000
    reader = FrameReader()
    for i in range(len(wire)):
        a.sendall(wire[i:i + 1])
        assert reader.feed_from(b)
        assert bool(reader.messages) == (i == len(wire) - 1)
    assert [bytes(f) for f in reader.messages.popleft()] == frames


def test_a_large_frame_is_read_into_a_writable_buffer_of_its_own(pair):
    a, b = pair
    big = bytes(range(256)) * 4096  # 1 MiB: more than the socket holds, read in pieces
    sender = threading.Thread(target=send_frames, args=(a, [b"s", big], False))
    sender.start()
    reader = FrameReader()
    while not reader.messages:
        assert reader.feed_from(b)
    sender.join(60)
    frames = reader.messages.popleft()
    assert bytes(frames[1]) == big and isinstance(frames[1], bytearray)


@pytest.mark.parametrize("wire", [
    struct.pack("<I", 0),  # no frames
    struct.pack("<I", MAX_FRAMES + 1),  # too many
])
def test_a_bad_frame_count_is_a_protocol_error(pair, wire):
    a, b = pair
    a.sendall(wire + b"\x00" * 16)
    with pytest.raises(ProtocolError, match="frame count"):
        FrameReader().feed_from(b)


def test_a_message_over_the_limit_before_authentication_is_refused(pair):
    a, b = pair
    a.sendall(struct.pack("<I2Q", 2, 300, 300))
    with pytest.raises(ProtocolError, match="too large"):
        FrameReader(max_message=512).feed_from(b)


def test_end_of_stream(pair):
    a, b = pair
    a.close()
    assert FrameReader().feed_from(b) is False


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_a_reader_holds_no_memory_for_its_buffer_until_it_reads(pair):
    """A job's connection (and a pool worker's start) does not pay for a read buffer it
    barely uses: 64 readers of 256 KiB buffers cost no resident memory until fed (a
    zeroed ``bytearray`` would cost 16 MiB here, and 64 page faults per forked job)."""
    before = _rss_kib()
    readers = [FrameReader() for _ in range(64)]
    assert _rss_kib() - before < 4096
    a, b = pair
    send_frames(a, [b"x" * 100], unix=False)
    assert _read(b, 1, readers[0]) == [[b"x" * 100]]


# -- the pool protocol ---------------------------------------------------------------------


def test_tasks_batch_layout_and_round_trip():
    fn = [b"pickled-function", b"its-buffer"]
    tasks = [(1, 7, fn, [b"args-1"]), (2, 7, None, [b"args-2", b"buffer"]), (3, 9, None, [])]
    frames = pack_tasks(tasks)
    header = frames[0]
    assert len(header) == 3 * struct.calcsize("<QIBH")
    assert struct.unpack_from("<QIBH", header, 0) == (1, 7, 1, 1)
    assert struct.unpack_from("<QIBH", header, struct.calcsize("<QIBH")) == (2, 7, 0, 2)
    # the function's frames come first, after their count, then each task's arguments
    assert frames[1:] == [struct.pack("<H", 2), *fn, b"args-1", b"args-2", b"buffer"]
    assert list(unpack_tasks(frames)) == [(1, 7, fn, [b"args-1"]),
                                          (2, 7, None, [b"args-2", b"buffer"]), (3, 9, None, [])]


def test_results_batch_layout_and_round_trip():
    results = [(5, True, [b"value"]), (6, False, [b"error", b"traceback"]), (8, True, [])]
    frames = pack_results(results, 0.25)
    assert struct.unpack_from("<d", frames[0])[0] == 0.25 == results_busy(frames)
    assert struct.unpack_from("<QBH", frames[0], 8) == (5, 1, 1)
    assert list(unpack_results(frames)) == results
    assert list(unpack_results(pack_results([], 0.0))) == []


def test_a_jobs_relayed_results_are_one_header_and_their_frames():
    """A job relays its workers' hellos in a ``from`` message and their batches of
    results, as they sent them, in one ``results_of`` message: one header (each
    worker's id, its batch's header) and the result frames, N + 1 frames for N results."""
    one = [(5, True, [b"value"])]
    several = [(6, False, [b"error", b"traceback"]), (8, True, []), (9, True, [b"x"])]
    up = [(11, [PoolOps.HELLO]), (12, [PoolOps.RESULTS, *pack_results(one, 0.5)]),
          (13, [PoolOps.RESULTS, *pack_results(several, 0.25)]), (14, [PoolOps.HELLO])]
    said, results = split_results(up)
    assert said == [up[0], up[3]] and results == [up[1], up[2]]
    frames = pack_results_of(results)
    assert frames[1:] == [b"value", b"error", b"traceback", b"x"]
    assert struct.unpack_from("<QH", frames[0]) == (12, 8 + 11)
    assert unpack_results_of(frames) == [(12, 0.5, one), (13, 0.25, several)]
    assert unpack_results_of(pack_results_of([])) == []
    # the header and the frames must match: a frame more or less is refused, not misread
    for wrong in (frames[:-1] + [b"extra", b"more"], frames[:-2], frames + [b"one more"]):
        with pytest.raises((ValueError, IndexError)):
            unpack_results_of(wrong)
    with pytest.raises(struct.error):
        unpack_results_of([frames[0][:-3], *frames[1:]])
    # the hellos go as they went before, in a ``to`` layout
    assert pack_to(said)[1:] == [PoolOps.HELLO, PoolOps.HELLO]


def test_the_pool_protocol_frames_survive_the_socket(pair):
    a, b = pair
    tasks = [(i, i % 3, [b"f%d" % i] if i < 3 else None, [b"a" * i]) for i in range(1, 40)]
    send_frames(a, [b"", PoolOps.TASKS, *pack_tasks(tasks)], unix=False)
    (msg,) = _read(b, 1, FrameReader())
    assert msg[1] == PoolOps.TASKS
    assert list(unpack_tasks(msg[2:])) == tasks
    assert FUNCTION_SLOTS >= 1


# -- operations ----------------------------------------------------------------------------

#: Every service with requests, and the class that names its protocol's operations.
PROTOCOLS = [
    (QueueService, QueueOps), (PipeService, PipeOps), (WaitService, WaitOps),
    (LockService, LockOps), (ThreadingLockService, LockOps), (SemaphoreService, SemaphoreOps),
    (EventService, EventOps),
    (ConditionService, ConditionOps), (BarrierService, BarrierOps), (ValueService, ValueOps),
    (LaunchService, LaunchOps), (ObjectService, ObjectOps), (ManagerService, ManagerOps),
    (SharedStore, SharedOps), (InspectService, InspectOps), (EndedPeers, ResendOps),
]


@pytest.mark.parametrize("service, ops", PROTOCOLS, ids=lambda v: getattr(v, "__name__", ""))
def test_each_operation_a_protocol_names_has_one_handler(service, ops):
    assert set(service.operations) == set(names(ops).values())
    for op, handler in service.operations.items():
        params = list(inspect.signature(handler).parameters)
        assert len(params) == 5, (op, params)  # self, server, peer, req_id, payload


def test_the_pool_service_handles_what_workers_and_their_jobs_send():
    worker_sends = {PoolOps.HELLO, PoolOps.INIT_FAILED, PoolOps.RESULTS, PoolOps.RETIRING,
                    PoolOps.RESUME, PoolOps.WORKER_ENDED, PoolOps.FROM, PoolOps.RESULTS_OF,
                    PoolOps.RESUME_JOB}
    assert set(PoolService.operations) == worker_sends
    assert {PoolOps.TASKS, PoolOps.STOP, PoolOps.TO}.isdisjoint(PoolService.operations)


def test_jobs_of_several_and_resets_are_served_by_the_pool_service():
    assert issubclass(PoolService, Dispatching) and issubclass(Dispatching, Reconnections)
    assert issubclass(Reconnections, JobsOfSeveral)
    assert set(JobsOfSeveral.operations) == {PoolOps.FROM, PoolOps.RESULTS_OF,
                                             PoolOps.WORKER_ENDED}
    assert set(Reconnections.operations) - set(JobsOfSeveral.operations) == {
        PoolOps.RESUME, PoolOps.RESUME_JOB}
    assert Dispatching.operations == Reconnections.operations  # it sends, handles nothing


def test_every_service_class_is_checked():
    """A new service must join PROTOCOLS (or the pool's test)."""
    def subclasses(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    with_ops = {cls for cls in subclasses(Service) if cls.operations
                and cls.__module__.startswith("fiber.")}
    # the pool's: its service, and its parts that serve jobs of several workers and resets
    # and that hand tasks out; the base of the sync services (its op: `abandon`)
    assert with_ops == {s for s, _ in PROTOCOLS} | {PoolService, JobsOfSeveral, Reconnections,
                                                   Dispatching, Parking}


class _Recorder(Dispatcher):
    protocol = "test"

    def __init__(self) -> None:
        self.calls: List[Any] = []

    @handles(b"one")
    def one(self, server: Any, peer: Any, req_id: bytes, payload: List[Any]) -> None:
        self.calls.append(("one", server, peer, req_id, payload))


class _Child(_Recorder):
    @handles(b"two")
    def two(self, server: Any, peer: Any, req_id: bytes, payload: List[Any]) -> None:
        self.calls.append(("two", payload))

    @handles(b"one")
    def one_again(self, server: Any, peer: Any, req_id: bytes, payload: List[Any]) -> None:
        self.calls.append(("one_again", payload))


def test_dispatch_goes_to_the_handler_of_the_operation():
    r = _Recorder()
    r.handle("srv", "peer", b"one", b"id", [b"p"])
    assert r.calls == [("one", "srv", "peer", b"id", [b"p"])]
    c = _Child()
    c.handle(None, None, b"two", b"", [1])
    c.handle(None, None, b"one", b"", [2])  # a subclass's handler replaces the base's
    assert c.calls == [("two", [1]), ("one_again", [2])]
    assert set(_Recorder.operations) == {b"one"}


def test_an_unknown_operation_names_the_protocol_and_the_operation():
    with pytest.raises(ValueError, match=r"unknown test operation b'nope'"):
        _Recorder().handle(None, None, b"nope", b"", [])
    with pytest.raises(ValueError, match=r"unknown queue operation b'pop'"):
        QueueService(0, False).handle(None, None, b"pop", b"", [])  # type: ignore[arg-type]


def test_two_handlers_of_one_operation_in_a_class_are_refused():
    with pytest.raises(TypeError, match="both handle"):
        class _Twice(Dispatcher):
            @handles(b"x")
            def a(self, *args: Any) -> None: ...

            @handles(b"x")
            def b(self, *args: Any) -> None: ...


@pytest.mark.parametrize("bad", ["put", b"", None])
def test_an_operation_is_a_non_empty_bytes_name(bad):
    with pytest.raises(TypeError):
        handles(bad)


def test_the_fork_server_master_handles_what_the_template_sends():
    template_sends = {ForkOps.READY, ForkOps.ERROR, ForkOps.FORKED, ForkOps.FORK_FAILED,
                      ForkOps.EXIT}
    named = {v for k, v in vars(ForkOps).items() if k.isupper()}
    assert named == template_sends | {ForkOps.INIT, ForkOps.FORK}
    # READY and ERROR are read while it starts; the reader thread takes the rest
    assert set(ForkServer._HANDLERS) == {ForkOps.FORKED, ForkOps.FORK_FAILED, ForkOps.EXIT}
    assert all(callable(getattr(ForkServer, h)) for h in ForkServer._HANDLERS.values())


def test_a_to_message_carries_each_workers_message_whole():
    from fiber.pool._protocol import pack_to, unpack_to

    many = [PoolOps.TASKS] + [b"x"] * 70_000  # a batch of tasks with many buffers
    messages = [(3, [PoolOps.TASKS, b"a", memoryview(b"bc")]), (2**40, [PoolOps.STOP]),
                (7, [PoolOps.TASKS, b"", b"d", b"e"]), (8, many)]
    got = unpack_to(pack_to(messages))
    assert [(wid, [bytes(f) for f in frames]) for wid, frames in got] == [
        (wid, [bytes(f) for f in frames]) for wid, frames in messages]


# -- typed requests (records) ------------------------------------------------------------

class _Typed(Dispatcher):
    protocol = "typed"

    def __init__(self) -> None:
        self.calls: List[Any] = []

    @handles(b"acquire", Acquire)
    def acquire(self, server: Any, peer: Any, req_id: bytes, msg: Acquire) -> None:
        self.calls.append(msg)


def test_a_handler_that_names_a_record_is_given_the_request_decoded():
    typed = _Typed()
    typed.handle(None, None, b"acquire", b"", Acquire(b"T1", 2.5).frames())
    assert typed.calls == [Acquire(b"T1", 2.5)]
    with pytest.raises((struct.error, IndexError)):  # a frame short: not that request
        typed.handle(None, None, b"acquire", b"", [b"T1"])
    assert len(typed.calls) == 1


RECORDS = [Wait(None), Wait(0.0), Wait(1.5), Caller(b"thread"), Acquire(b"t", None),
           Acquire(b"t", 0.0), AcquireRestore(b"t", 3), Notify(-1), Notify(2),
           Ticket(b"12345678"), Sleep(b"12345678", 0.25),
           Send(0, [b"p", b"pickle", b"buffer"]), Send(1, [b"b", b""]), Receive(0, None),
           Receive(1, 0.0), Receive(1, 2.5), Handoff(1, b"12345678"), End(0),
           WaitAny(None, [(b"p1", 0), (b"p2", 1)]), WaitAny(0.5, []), Cancel(b"req-id"),
           Get(b"k" * 16, "boot/4026531840", ""), Get(b"k" * 16, "host", "10.0.0.2:4000"),
           Access(b"", [b"value"]), Access(b"thread", [b"raw", b"pickle"]), Access(b"t", []),
           Attribute("value"), Assign("value", 3), Assign("x", b"bytes"), Item(2),
           Item(slice(1, None, 2)), AssignItem(0, 1.5), AssignItem(slice(0, 2), [1, 2]),
           Call.of("append", (1,), None), Call.of("update", (), {"k": [1, 2]}),
           ProxyHandoff(b"12345678"), Create("dict", (), {"a": 1}), Create("Env", (3, "x"), {}),
           Created(b"cid", b"ok", [b"spec"]), Created(b"cid", b"err", [])]
# the launch and inspect protocols (fiber.process)
RECORDS += [Fetch(b"tok", 1234, "host-1"), ExitReport(b"tok", -9, True),
            ExitReport(b"tok", 0, False), JobToken(b"tok"), Output(b"tok", 2, b"line\n"),
            Source("<stdin>"), Hello(b"tok", b"boot:1:2", 77), Hello(b"tok", b"", 1),
            Stats(b"tok", 1.5, 1 << 20), Stack(b"tok", b"12345678", "Thread main:\n")]
# the queue protocol and its lending (fiber.queues)
RECORDS += [PutWait(None, b"ticket", [b"pickle", b"buffer"]), PutWait(0.0, b"ticket", []),
            QueueGet(None), QueueGet(2.5, b"ticket"), QueueGet(0.0), Withdraw(b"ticket"),
            TaskDone(b"ticket"), Pull(64, b"leasekey"), LeaseItems(b"leasekey", [1, 2, 3]),
            LeaseItems(b"k", []), LeaseKey(b"leasekey")]
# the pool's small requests (fiber.pool._protocol; its batches are packed layouts)
RECORDS += [WorkerHello(10_000), InitFailed("Traceback ...\nValueError: x\n", 7),
            Retiring(3, 15, [1, 2, 99]), Retiring(3, 10, []), Resume(12, [5, 6]),
            Resume(12, []), WorkerEnded(4, -9), WorkerEnded(4, 0), ResumeJob({}, []),
            ResumeJob({3: [5, 6], 2**40: []}, [5, 6, 9]), ResumeJob({3: [5]}, [5], {4: [7]}),
            ResumeJob({}, [], {4: []})]
# the resends' request (fiber.transport._resend) and the parent's pushes to a job
RECORDS += [CountOf(0), CountOf(2**63), AskStack(b"12345678"), Watching(60.0, 0.25)]
#: The replies' records (read with `reply_of`), beside the services that answer them.
REPLIES = [Counted(0), Counted(12345), Count(0), Count(7), Count(-1), Ready([]), Ready([0, 2, 9]),
           Replacement(None), Replacement(2**40), Kept([]), Kept([3, 4, 5]), SourceText(""),
           SourceText("def f():\n    return 1\n"), Holder("tcp://10.0.0.2:4000")]
RECORDS += REPLIES


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_records_frames_decode_to_the_record(record):
    frames = record.frames()
    assert all(isinstance(f, bytes) for f in frames)
    assert type(record).decode([bytearray(f) for f in frames]) == record  # as received


#: Records and the frames their protocols sent before them, byte for byte.
LAYOUTS = [
    (Send(1, [b"p", b"data"]), [b"1", b"p", b"data"]),
    (Receive(0, None), [b"0", encode_wait(True, None)]),
    (Receive(1, 0.0), [b"1", encode_wait(True, 0.0)]),
    (Handoff(0, b"tok"), [b"0", b"tok"]),
    (End(1), [b"1"]),
    (WaitAny(1.5, [(b"p1", 1), (b"p2", 0)]),
     [encode_wait(True, 1.5), b"p1", b"1", b"p2", b"0"]),
    (Cancel(b"rid"), [b"rid"]),
    (Get(b"key", "host", ""), [b"key", b"host", b""]),
    (Get(b"key", "host", "10.0.0.2:4000"), [b"key", b"host", b"10.0.0.2:4000"]),
    (Access(b"tid", [b"value"]), [b"tid", b"value"]),
    (Attribute("raw"), [b"raw"]),
    (Assign("value", 2.5), [b"value", *dumps(2.5)]),
    (Item(slice(1, 3)), dumps(slice(1, 3))),
    (AssignItem(1, 7), dumps((1, 7))),
    (Call.of("get", [0], None), dumps(("get", (0,), {}))),
    (ProxyHandoff(b"tok"), [b"tok"]),
    (Create("list", (1,), {"k": 2}), dumps(("list", (1,), {"k": 2}))),
    (Created(b"cid", b"ok", [b"spec", b"buf"]), [b"cid", b"ok", b"spec", b"buf"]),
    (CountOf(5), [(5).to_bytes(8, "little")]),
    (AskStack(b"rq"), [b"rq"]),
    (Watching(60.0, 0.5), [b"60", b"0.5"]),
    (ResumeJob({3: [7], 4: []}, [7, 8]),  # a `to` layout: one frame a worker, the job's last
     [struct.pack("<QIQIQI", 3, 1, 4, 1, 0, 1), struct.pack("<Q", 7), b"",
      struct.pack("<2Q", 7, 8)]),
    (ResumeJob({3: [7]}, [7], {5: [8]}),  # a worker that ended: a second frame says so
     [struct.pack("<QIQIQI", 3, 1, 5, 2, 0, 1), struct.pack("<Q", 7), struct.pack("<Q", 8),
      b"ended", struct.pack("<Q", 7)]),
    # replies
    (Counted(3), [(3).to_bytes(8, "little")]),
    (Count(-1), [struct.pack("<q", -1)]),
    (Count(2), [struct.pack("<q", 2)]),
    (Ready([1, 3]), [struct.pack("<I", 1) + struct.pack("<I", 3)]),
    (Ready([]), [b""]),
    (Replacement(9), [(9).to_bytes(8, "little")]),
    (Replacement(None), [b""]),
    (Kept([1, 2]), [struct.pack("<2Q", 1, 2)]),
    (SourceText("x = 1\n"), [b"x = 1\n"]),
    (Holder("tcp://h:1"), [b"tcp://h:1"]),
]


@pytest.mark.parametrize("record, frames", LAYOUTS, ids=lambda r: type(r).__name__)
def test_a_record_writes_the_frames_its_protocol_sent(record, frames):
    assert record.frames() == frames


def test_a_request_naming_no_pipe_end_is_not_decoded():
    for tag in (b"2", b"/", b"01", b""):
        with pytest.raises((ValueError, IndexError)):
            End.decode([tag])
    with pytest.raises(ValueError):  # a service named without its end
        WaitAny.decode([encode_wait(True, None), b"p1"])


@pytest.mark.parametrize("frames", [
    [b"\x01" * 11],  # a header that is not whole entries
    [struct.pack("<QI", 3, 1)], [struct.pack("<QI", 3, 0)],  # a worker's ids missing
    [struct.pack("<QI", 3, 1), b"\x01" * 7],  # ids that are not u64s
])
def test_a_malformed_resume_job_is_not_decoded(frames):
    with pytest.raises((struct.error, IndexError)):
        ResumeJob.decode(frames)


def test_a_managed_call_stays_pickled_until_it_runs():
    call = Call.decode([bytearray(f) for f in Call.of("put", (1, "a"), {"k": None}).frames()])
    assert call.unpickled() == ("put", (1, "a"), {"k": None})
    assert not call.holds_proxies()
    with pytest.raises(ValueError):
        Call.decode([])


def test_wait_of_a_call_is_what_encode_wait_sends():
    for block, timeout in [(False, None), (False, 3.0), (True, None), (True, 0.5),
                           (True, -2.0)]:
        assert Wait.of(block, timeout).frames() == [encode_wait(block, timeout)]
    # the bytes every wait has been sent as (a double: 0 now, -1 for ever, else seconds)
    assert [encode_wait(b, t) for b, t in [(False, 3.0), (True, None), (True, 0.5),
                                            (True, -2.0)]] == [
        struct.pack("<d", 0.0), struct.pack("<d", -1.0), struct.pack("<d", 0.5),
        struct.pack("<d", 0.0)]


def test_a_malformed_request_is_answered_as_an_error_and_the_hub_serves_on():
    srv = Server("127.0.0.1", name="fiber-test-records")
    try:
        srv.register(b"lock", LockService(recursive=False))
        c = Client(srv.address, timeout=10)
        status, frames = c.request(b"lock", LockOps.ACQUIRE, [b"A"], timeout=10)  # no wait
        assert status == b"err"
        error = unpack_exception(loads(frames))
        assert isinstance(error, IndexError) and "decode" in str(error.__cause__)
        assert c.request(b"lock", LockOps.ACQUIRE, Acquire(b"A", None).frames(),
                         timeout=10) == (b"ok", [])
        assert c.request(b"lock", LockOps.OWNED, Caller(b"A").frames(),
                         timeout=10) == (b"ok", [])
        c.close()
    finally:
        srv.close()


def test_a_locks_packed_requests_are_its_records_frames():
    """A lock's client sends its acquires and releases through ``pack`` (no record made):
    the same frames as the records'."""
    for block, timeout in [(False, None), (True, None), (True, 0.25), (True, -1.0)]:
        assert Acquire.pack(b"t", block, timeout) == Acquire(
            b"t", Wait.of(block, timeout).seconds).frames()
    assert Caller.pack(b"t") == Caller(b"t").frames()


def test_a_pipes_packed_requests_are_its_records_frames():
    """A pipe's client sends its messages and receives through ``pack`` (no record made):
    the same frames as the records'."""
    assert Send.pack(1, [b"p", b"data"]) == Send(1, [b"p", b"data"]).frames()
    for wait in (None, 0.0, 2.5):
        assert Receive.pack(0, wait) == Receive(0, wait).frames()


def test_a_pipes_message_is_its_kind_then_its_data():
    """A pipe's message (`Message`): written by ``send``/``send_bytes``, read by ``recv``
    (no object made: every message goes through it)."""
    assert Message.raw(b"data") == [b"b", b"data"]
    pickled = dumps({"k": [1, 2]})
    assert Message.pickled(pickled) == [b"p", *pickled]
    assert Message.load([bytearray(f) for f in Message.pickled(pickled)]) == {"k": [1, 2]}
    assert Message.load(Message.raw(pickle.dumps(7))) == 7  # as multiprocessing's recv
    assert Message.as_bytes(Message.raw(b"data")) == b"data"
    assert pickle.loads(Message.as_bytes(Message.pickled(pickled))) == {"k": [1, 2]}


def test_a_pull_answers_layout_and_round_trip():
    items = [[b"pickle", b"buffer"], [], [b"x"]]
    frames = pack_loan(40, items)
    assert frames[0] == struct.pack("<QI3I", 40, 3, 2, 0, 1)
    assert frames[1:] == [b"pickle", b"buffer", b"x"]
    assert unpack_loan(frames) == [(40, items[0]), (41, []), (42, [b"x"])]


@pytest.mark.parametrize("record", REPLIES, ids=lambda r: type(r).__name__)
def test_reply_of_reads_a_replys_frames_as_its_record(record):
    assert reply_of(type(record), [bytearray(f) for f in record.frames()]) == record


@pytest.mark.parametrize("record, frames", [
    (Counted, []), (Counted, [b"\x01"]), (Count, [b"1234"]), (Count, []),
    (Ready, [b"\x00\x00\x00"]), (Replacement, [b"\x01\x02"]), (Kept, [b"1234567"]),
    (Holder, [b"\xff"]), (Kept, []),
])
def test_a_malformed_reply_is_a_clear_error(record, frames):
    """A reply whose frames are not its record's names the record (a peer's fault),
    with the decoding error as its cause."""
    with pytest.raises(MalformedReply, match=f"a malformed {record.__name__} reply") as e:
        reply_of(record, frames)
    assert isinstance(e.value, ProtocolError)
    assert isinstance(e.value.__cause__, (struct.error, IndexError, ValueError))


def test_a_malformed_reply_is_raised_to_the_caller_and_the_hub_serves_on(monkeypatch):
    """End to end: a semaphore's hub that answers its value with bytes that are not a
    count raises `MalformedReply` in the caller, not a bare struct.error."""
    from fiber.synchronize._primitives import Semaphore

    def short(service: Any, server: Any, peer: Any, req_id: bytes, payload: Any) -> None:
        server.reply(peer, req_id, b"ok", [b"short"])

    sem = Semaphore(2)
    assert sem.get_value() == 2
    monkeypatch.setitem(SemaphoreService.operations, SemaphoreOps.VALUE, short)
    with pytest.raises(MalformedReply, match="a malformed Count reply"):
        sem.get_value()
    monkeypatch.undo()
    assert sem.acquire(timeout=5) and sem.get_value() == 1
