"""Serialization: out-of-band buffers, by-value functions, framing of large messages."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from fiber._process_state import here
from fiber.transport.framing import FrameReader, ProtocolError, send_frames
from fiber.transport.serialization import dumps, dumps_bytes, loads


def test_large_array_travels_out_of_band():
    a = np.random.rand(1_000_000)  # 8 MB
    frames = dumps(a)
    assert len(frames) == 2
    assert memoryview(frames[0]).nbytes < 1024  # the pickle holds no array data
    assert memoryview(frames[1]).nbytes == a.nbytes
    b = loads(frames)
    assert np.array_equal(a, b) and b.flags.writeable


def test_small_objects_stay_in_band():
    assert len(dumps({"a": b"x" * 100})) == 1



def test_large_buffers_go_out_of_band_after_small_ones_and_beside_a_lambda():
    """``dumps`` first tries every buffer in band and stops at a large one: what follows
    it in the object (another large array, a function only cloudpickle ships) must
    still travel, the large arrays out of band and the small ones in the pickle."""
    small, big1, big2 = np.arange(10.0), np.random.rand(20_000), np.random.rand(30_000)
    frames = dumps([small, big1, big2])
    assert [memoryview(f).nbytes for f in frames[1:]] == [big1.nbytes, big2.nbytes]
    out = loads(frames)
    assert all(np.array_equal(a, b) for a, b in zip(out, [small, big1, big2]))
    frames = dumps((big1, lambda x: x + 1))  # noqa: E731 - by value: the cloudpickle path
    assert [memoryview(f).nbytes for f in frames[1:]] == [big1.nbytes]
    arr, fn = loads(frames)
    assert np.array_equal(arr, big1) and fn(1) == 2

def test_lambdas_and_closures_by_value():
    k = 3
    f = loads(dumps(lambda x: x * k))
    assert f(2) == 6


# -- functions of __main__: one globals namespace per process, as if it imported the script --


def _main_functions(source: str) -> dict:
    """Run ``source`` as a main script would be (globals named ``__main__``): its functions
    are pickled by value. Names are unique per test: the namespace lasts as the process."""
    scope = {"__name__": "__main__"}
    exec(textwrap.dedent(source), scope)
    return scope


def test_main_functions_share_one_namespace_where_assignments_are_kept():
    main = _main_functions("""
        t1_model = None
        def t1_init(value):
            global t1_model
            t1_model = value
        def t1_use():
            return t1_model
    """)
    init = loads(dumps(main["t1_init"]))
    init("loaded")
    use = loads(dumps(main["t1_use"]))  # brings t1_model = None: assigned here since, kept
    assert use() == "loaded"
    assert use.__globals__ is init.__globals__ is here.transport.main_namespace
    assert main["t1_model"] is None  # the sender's globals are not touched


def test_redefined_main_function_replaces_the_one_installed():
    main = _main_functions("""
        def t2_helper():
            return "old"
        def t2_call():
            return t2_helper()
    """)
    old_call = loads(dumps(main["t2_call"]))
    assert old_call() == "old"
    exec("def t2_helper():\n    return 'new'", main)  # a notebook cell run again
    assert loads(dumps(main["t2_call"]))() == "new"
    assert old_call() == "new"  # one namespace: the earlier function sees it too


def test_plain_unpickler_and_main_classes_use_the_namespace():
    """``dumps_bytes`` (a pickle inside a launch payload) needs no fiber unpickler; the
    methods of a class of ``__main__`` read the same globals."""
    main = _main_functions("""
        t3_scale = 1
        def t3_set_scale(value):
            global t3_scale
            t3_scale = value
        class T3Model:
            def predict(self, x):
                return x * t3_scale
    """)
    pickle.loads(dumps_bytes(main["t3_set_scale"]))(10)
    assert loads(dumps(main["T3Model"]())).predict(2) == 20


def test_functions_not_of_main_keep_their_own_globals():
    assert loads(dumps(os.path.join)) is os.path.join  # importable: by reference
    k = 3
    assert loads(dumps(lambda x: x * k)).__globals__ is not here.transport.main_namespace
    other = {"__name__": "t4_dynamic_module"}
    exec("def t4_f():\n    return 1", other)
    assert loads(dumps(other["t4_f"])).__globals__ is not here.transport.main_namespace


SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "main_namespace.py")


def _run_main_script(scenario: str):
    """Run a scenario of unit/scripts/main_namespace.py as ``__main__``; its JSON result."""
    out = subprocess.run([sys.executable, SCRIPT, scenario], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_program_sending_main_functions_exits_cleanly():
    """Exit code 0 and an empty stderr after functions, a class and lambdas of the main
    script went to workers (Python 3.12 segfaulted at exit, 3.13 printed BufferError)."""
    script = os.path.join(os.path.dirname(__file__), "scripts", "clean_exit.py")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=180)
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout.split() == ["[0,", "2,", "4,", "6]", "[10,", "11,", "12]", "7", "5"]


def test_pickle_frame_of_a_main_function_exports_no_buffer():
    """The cloudpickle path returns bytes, not a view that keeps a BytesIO exported."""
    main = _main_functions("def t9_f():\n    return 1")
    frames = dumps(main["t9_f"])
    assert len(frames) == 1 and isinstance(frames[0], bytes)


def test_pool_initializer_sets_globals_the_tasks_read():
    assert _run_main_script("initializer") == ["loaded"] * 4


def test_global_set_by_a_task_is_read_by_a_later_task():
    assert _run_main_script("task_global") == ["filled", "from the first task"]


def test_helper_redefined_between_maps_is_the_new_one_in_the_worker():
    old, new = ["old", "old"], ["new", "new"]
    assert _run_main_script("redefinition") == [old, new, new]


def test_globals_changed_in_place_are_not_reset_by_a_later_function():
    assert _run_main_script("mutated_in_place") == [
        [1, 2, 3, 4], 4, ["set by the initializer"] * 4]


def test_process_target_globals_are_read_by_a_function_sent_later():
    assert _run_main_script("process_target") == "set by the target"


def test_unpicklable_raises_type_error():
    with pytest.raises(TypeError):
        dumps(threading.Lock())


def _tcp_pair():
    listener = socket.create_server(("127.0.0.1", 0))
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    listener.close()
    return a, b


@pytest.mark.parametrize("kind", ["unix", "tcp"])
def test_framing_200mb(kind):
    """Unix sockets carry big frames as memfds, TCP as bytes; both arrive intact."""
    a, b = socket.socketpair() if kind == "unix" else _tcp_pair()
    big = np.arange(25_000_000, dtype=np.float64)
    t = threading.Thread(target=send_frames, args=(a, dumps(big)))
    t.start()
    reader = FrameReader(unix=kind == "unix")
    while not reader.messages:
        assert reader.feed_from(b)
    t.join()
    frames = reader.messages.popleft()
    got = loads(frames)
    assert np.array_equal(big, got) and got.flags.writeable
    got[0] = -1  # the memfd was a copy: the sender's memory is not touched
    assert big[0] == 0
    assert (type(frames[1]).__name__ == "mmap") == (kind == "unix")
    a.close()
    b.close()
    reader.close()


def _one_message(sock, frames):
    send_frames(sock[0], frames)
    reader = FrameReader(unix=True)
    while not reader.messages:
        assert reader.feed_from(sock[1])
    return reader.messages.popleft()


def _memfd_inode(frame):
    from fiber.transport import memfd

    return os.fstat(here.transport.memfd_kept[memfd._address(frame)][1]).st_ino


def test_received_frame_sent_on_unchanged_is_not_copied():
    """A big frame received as a memfd and sent on unmodified (a worker returning its
    argument) travels as the same sealed memfd; once written to, it is copied."""
    pair = socket.socketpair()
    big = np.arange(1 << 18, dtype=np.float64)  # 2 MiB
    first = _one_message(pair, dumps(big))
    arr = loads(first)
    again = _one_message(pair, dumps(arr))
    assert _memfd_inode(again[1]) == _memfd_inode(first[1])
    assert np.array_equal(loads(again), big)
    arr[7] = -1  # a private page now: the memfd no longer holds this array
    changed = loads(_one_message(pair, dumps(arr)))
    assert changed[7] == -1 and big[7] == 7 and loads(again)[7] == 7
    for sock in pair:
        sock.close()


def test_memfd_whose_size_is_not_sealed_is_copied_on_arrival():
    """A memfd frame is mapped shared (no copy) only when its size is sealed: one its
    sender could still truncate is copied, so that the receiver can never get SIGBUS."""
    import array
    import os

    a, b = socket.socketpair()
    size = 2 << 20
    fd = os.memfd_create("test-frame")
    os.write(fd, b"x" * size)
    a.sendmsg([(1).to_bytes(4, "little") + ((1 << 63) | size).to_bytes(8, "little")],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    reader = FrameReader(unix=True)
    while not reader.messages:
        assert reader.feed_from(b)
    (frame,) = reader.messages.popleft()
    os.ftruncate(fd, 0)  # the sender takes the pages back
    assert frame[:] == b"x" * size
    for closing in (a, b, reader):
        closing.close()
    os.close(fd)


def test_seals_a_busy_memfd_refuses_for_a_moment_are_added_when_it_is_free():
    """The kernel refuses a memfd's F_SEAL_WRITE (EBUSY) while a page of it has another
    reference; a loaded host can leave one for a moment after the write, and a Slurm job
    in CI then failed to unpickle a `fiber.shared` array ("Device or resource busy").
    `memfd.add_seals` tries again: here a writable shared mapping holds the pages (EBUSY
    at once, every time) until a thread drops it, 50 ms later."""
    import errno
    import fcntl
    import mmap
    import os
    import time

    from fiber.transport import memfd

    fd = os.memfd_create("test-frame", os.MFD_ALLOW_SEALING)
    os.write(fd, b"x" * mmap.PAGESIZE)
    held = mmap.mmap(fd, mmap.PAGESIZE, flags=mmap.MAP_SHARED)
    with pytest.raises(OSError) as busy:  # what the kernel says while it is held
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
    assert busy.value.errno == errno.EBUSY
    threading.Timer(0.05, held.close).start()
    t = time.monotonic()
    memfd.add_seals(fd)
    assert 0.04 < time.monotonic() - t < 5
    assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
    os.close(fd)


def test_descriptors_before_auth_are_refused_and_closed():
    import os

    a, b = socket.socketpair()
    r, w = os.pipe()
    a.sendmsg([(1).to_bytes(4, "little") + ((1 << 63) | (1 << 20)).to_bytes(8, "little")],
              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, __import__("array").array("i", [r]))])
    reader = FrameReader(max_message=512, unix=True)
    with pytest.raises(ProtocolError):
        reader.feed_from(b)
    reader.close()
    for fd in (r, w):
        os.close(fd)
    a.close()
    b.close()


def test_malformed_stream_is_rejected():
    a, b = socket.socketpair()
    a.sendall(b"\x00\x00\x00\x00garbage")
    with pytest.raises(ProtocolError):
        FrameReader().feed_from(b)
    a.close()
    b.close()


# -- what fiber carries itself (transport/_by_value.py), whatever cloudpickle is installed --


def test_a_shipped_code_object_keeps_its_file_name():
    """cloudpickle 3.1.3 ships every code object as ``<dynamic-code>``; fiber's do not."""
    main = _main_functions("def t20_f():\n    return lambda: 1\n")
    inner = main["t20_f"]()
    for fn in (main["t20_f"], inner, lambda: 2):
        assert loads(dumps(fn)).__code__.co_filename == fn.__code__.co_filename


def test_a_main_function_keeps_its_attributes_closure_and_recursion():
    main = _main_functions('''
        import os
        def t21_outer(n):
            def fact(k):
                return 1 if k <= 1 else k * fact(k - 1)  # itself, through its closure
            return fact
        def t21_fib(n: int, *, memo: dict = None) -> int:
            "doc"
            return n if n < 2 else t21_fib(n - 1) + t21_fib(n - 2)  # itself, as a global
        t21_fib.tag = "kept"
        def t21_sep():
            return os.path.sep
    ''')
    fact = loads(dumps(main["t21_outer"](0)))
    assert fact(5) == 120
    fib = loads(dumps(main["t21_fib"]))
    assert fib(10) == 55 and fib.__doc__ == "doc" and fib.tag == "kept"
    assert fib.__kwdefaults__ == {"memo": None} and fib.__qualname__ == "t21_fib"
    assert fib.__annotations__ == main["t21_fib"].__annotations__ and fib.__annotations__
    assert loads(dumps(main["t21_sep"]))() == os.path.sep


def test_a_main_functions_attribute_names_do_not_ship_globals_of_that_name():
    """``self.t22_model`` names ``t22_model`` as an attribute: a global of that name (a
    big or an unpicklable object) must not travel with the method."""
    main = _main_functions('''
        import threading
        t22_model = threading.Lock()
        class T22:
            def __init__(self):
                self.t22_model = 1
            def get(self):
                return self.t22_model
    ''')
    assert loads(dumps(main["T22"]())).get() == 1



def fiber_test_named_in_main() -> None:
    """(Made a function of ``__main__`` by the test below.)"""


def test_only_a_pickle_that_names_a_global_is_searched_for_main_and_connections():
    """`dumps` keeps the C pickler's output unless it names ``__main__`` or a
    ``multiprocessing`` connection; every global is pushed by the STACK_GLOBAL opcode,
    so a pickle without it is kept unsearched (plain data: a task's usual arguments)."""
    import datetime

    from fiber.transport.serialization import _names_no_global

    plain = pickle.dumps((1, (1.0, "__main__", b"multiprocessing.connection")), protocol=5)
    assert pickle.STACK_GLOBAL[0] not in plain and _names_no_global(plain)
    assert _names_no_global(pickle.dumps(datetime.date(2020, 1, 1), protocol=5))
    main = sys.modules["__main__"]
    fn = fiber_test_named_in_main
    fn.__module__ = "__main__"
    main.fiber_test_named_in_main = fn  # type: ignore[attr-defined]
    try:
        assert not _names_no_global(pickle.dumps((1, (fn,)), protocol=5))
    finally:
        fn.__module__ = __name__
        del main.fiber_test_named_in_main  # type: ignore[attr-defined]
    assert loads(dumps((1, ("__main__",)))) == (1, ("__main__",))
