"""Targets for child processes; importable by the children (fiber is installed where they run)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import warnings


def noop() -> None:
    pass


def exit_with(code: int) -> None:
    sys.exit(code)


def hard_exit(code: int) -> None:
    os._exit(code)


def raise_value_error(message: str) -> None:
    raise ValueError(message)


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def put_at_exit(q) -> None:  # type: ignore[no-untyped-def]
    """Register an ``atexit`` handler that puts on ``q`` and prints: a job runs them at
    its end, after its threads, as a spawn child of multiprocessing does."""
    import atexit

    def last_words() -> None:
        print("said at exit", flush=True)
        q.put("put at exit")

    atexit.register(last_words)


def kill_self(sig: int = signal.SIGKILL) -> None:
    os.kill(os.getpid(), sig)


def put_identity(q) -> None:  # type: ignore[no-untyped-def]
    import fiber

    parent = fiber.parent_process()
    q.put((fiber.current_process().name, os.getpid(), parent.name if parent else None,
           fiber.get_config().pool_prefetch))


def produce(q, start: int, count: int) -> None:  # type: ignore[no-untyped-def]
    for i in range(start, start + count):
        q.put(i)


def consume(q, out, sentinel=None) -> None:  # type: ignore[no-untyped-def]
    got = []
    while True:
        item = q.get(timeout=60)
        if item is sentinel:
            break
        got.append(item)
    out.put(got)


def echo_pipe(conn) -> None:  # type: ignore[no-untyped-def]
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        conn.send(msg)


def send_then_exit(conn, value) -> None:  # type: ignore[no-untyped-def]
    conn.send(value)
    conn.close()


def joinable_worker(q) -> None:  # type: ignore[no-untyped-def]
    while True:
        item = q.get(timeout=60)
        q.task_done()
        if item is None:
            return


def take_some(q, k, out) -> None:  # type: ignore[no-untyped-def]
    """Take ``k`` items from ``q`` (lent ahead to this process once its gets meet a
    backlog) and send them on ``out``; then end."""
    out.put([q.get(timeout=30) for _ in range(k)])


def roundtrip_queue(inq, outq) -> None:  # type: ignore[no-untyped-def]
    outq.put(inq.get(timeout=120))


def spawn_child_and_report(q, daemon: bool) -> None:  # type: ignore[no-untyped-def]
    import fiber

    p = fiber.Process(target=sleep, args=(120,), daemon=daemon)
    p.start()
    q.put(p.pid)
    time.sleep(120)


def leave_a_grandchild_on_my_output(q) -> None:  # type: ignore[no-untyped-def]
    """Start a plain subprocess that inherits this job's output and outlives it (it
    sleeps a minute), print a line, and put the subprocess's pid on ``q``."""
    import subprocess

    grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    print("started a grandchild", flush=True)
    q.put(grandchild.pid)


def timed_recv(conn, spare: bool) -> None:  # type: ignore[no-untyped-def]
    """Say ``ready``, then receive one item, with ``fiber.transport.cpus.spare_cpu`` answering
    ``spare``; send back the item and the time this process spent polling for it."""
    from fiber.transport import cpus as _cpus

    _cpus.spare_cpu = lambda: spare  # type: ignore[assignment]
    conn.send("ready")
    start = _cpus.polled_seconds()
    item = conn.recv()
    conn.send((item, _cpus.polled_seconds() - start))


def pipe_of_my_own(conn) -> None:  # type: ignore[no-untyped-def]
    """Create a pipe here (served by this process's hub), hand one end back through
    ``conn``, then on each command: ``"send"`` sends on the kept end, ``"watches"`` says
    how many ``wait()`` calls this hub holds, ``"wait"`` waits on ``conn``'s parent end
    too... and ``None`` ends."""
    import fiber
    from fiber._core import _runtime
    from fiber.connection._watch import WAIT_SERVICE

    mine, theirs = fiber.Pipe()
    conn.send(theirs)
    while True:
        cmd = conn.recv()
        if cmd is None:
            return
        if cmd == "send":
            mine.send("from the child's hub")
        elif cmd == "watches":
            conn.send(len(_runtime.hub().service(WAIT_SERVICE).watches))


def wait_then_report(conns) -> None:  # type: ignore[no-untyped-def]
    """Wait (no timeout) on pipe ends served by the parent's hub; report which were
    ready, by index, on the first one."""
    from fiber.connection import wait

    ready = wait(conns)
    conns[0].send([conns.index(c) for c in ready])


def put_from_a_thread_later(q, seconds: float) -> None:  # type: ignore[no-untyped-def]
    """Return at once, leaving a non-daemon thread that puts "late" after ``seconds``."""
    threading.Thread(target=lambda: (time.sleep(seconds), q.put("late"))).start()


def recv_n_then_exit(conn, n: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(n):
        conn.recv()


def send_many(conn, count: int, size: int) -> None:  # type: ignore[no-untyped-def]
    for _ in range(count):
        conn.send_bytes(b"x" * size)


def echo_pipe_from(q) -> None:  # type: ignore[no-untyped-def]
    """echo_pipe on a connection taken from queue ``q``."""
    echo_pipe(q.get(timeout=60))


def report_parent_sentinel(q) -> None:  # type: ignore[no-untyped-def]
    """Put what waiting 0.5 s on ``parent_process().sentinel`` returned, whether the
    parent is alive and whether the sentinel is the same descriptor twice (or the error)."""
    import multiprocessing.connection

    import fiber

    parent = fiber.parent_process()
    try:
        fd = parent.sentinel
    except Exception as e:
        q.put(repr(e))
        return
    q.put((multiprocessing.connection.wait([fd], timeout=0.5), parent.is_alive(),
           fd == parent.sentinel))


def watch_parent_sentinel(q) -> None:  # type: ignore[no-untyped-def]
    """The multiprocessing idiom: a thread waits on ``parent_process().sentinel``. It puts
    ``("watching", pid, is_alive, ready)`` before waiting and ``("gone", ready,
    is_alive)`` once the sentinel is readable; this job then ends (it outlives its parent,
    as a multiprocessing child does)."""
    import multiprocessing.connection

    import fiber

    parent = fiber.parent_process()
    reported = threading.Event()

    def watch() -> None:
        try:
            fd = parent.sentinel
        except Exception as e:
            q.put(("error", repr(e)))
            return
        q.put(("watching", os.getpid(), parent.is_alive(),
               multiprocessing.connection.wait([fd], timeout=0)))
        ready = multiprocessing.connection.wait([fd], timeout=120)
        q.put(("gone", ready == [fd], parent.is_alive()))
        reported.set()

    threading.Thread(target=watch, daemon=True).start()
    reported.wait(120)


def start_sentinel_watcher(q) -> None:  # type: ignore[no-untyped-def]
    """Start a child running ``watch_parent_sentinel(q)``, then wait to be killed."""
    import fiber

    fiber.Process(target=watch_parent_sentinel, args=(q,)).start()
    time.sleep(120)


class Payload:
    """An argument whose collection a test can watch (weak references)."""


def take(payload) -> None:  # type: ignore[no-untyped-def]
    pass


def try_reader(q, out) -> None:  # type: ignore[no-untyped-def]
    """Report what ``q._reader`` does in a process that did not create ``q``."""
    try:
        q._reader  # noqa: B018 - the attribute's getter is what is tried
    except NotImplementedError as e:
        out.put(("NotImplementedError", str(e)))
    else:
        out.put(("no error", ""))
def identity(*args, **kwargs):
    return args[0] if len(args) == 1 and not kwargs else (args, kwargs)


def put_anchor_keepalive(q) -> None:  # type: ignore[no-untyped-def]
    """This job's connection to its parent: its family, for TCP its keepalive idle time
    (s) and user timeout (ms), as the kernel holds them, and this job's network namespace
    (``/proc/self/ns/net``'s target)."""
    import socket

    from fiber._core._clients import ensure_anchor
    from fiber._core._runtime import PARENT_ENV

    sock = ensure_anchor(os.environ[PARENT_ENV]).sock
    net = os.readlink("/proc/self/ns/net")
    if sock.family == socket.AF_UNIX:
        q.put(("unix", None, None, net))
        return
    q.put(("tcp", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
           sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT), net))


def report_stdlib_parent(q) -> None:  # type: ignore[no-untyped-def]
    """Put what the standard library's ``parent_process()`` says in this job (its three
    spellings: ``(pid, name, is_alive())`` each, or None), this job's pid, and what it says
    in a child this job forks with the standard library (that child's parent's pid)."""
    import multiprocessing
    import multiprocessing.process

    answers = [multiprocessing.parent_process(), multiprocessing.process.parent_process(),
               multiprocessing.get_context("spawn").parent_process()]
    forked = None
    if "fork" in multiprocessing.get_all_start_methods():
        fork = multiprocessing.get_context("fork")
        inner = fork.SimpleQueue()
        child = fork.Process(target=_put_stdlib_parent_pid, args=(inner,))
        with warnings.catch_warnings():  # 3.12+: forking a process that has threads
            warnings.simplefilter("ignore", DeprecationWarning)
            child.start()
        forked = inner.get()
        child.join(60)
    q.put(([(a.pid, a.name, a.is_alive()) if a is not None else None for a in answers],
           os.getpid(), forked))


def _put_stdlib_parent_pid(q) -> None:  # type: ignore[no-untyped-def]
    import multiprocessing

    parent = multiprocessing.parent_process()
    q.put(parent.pid if parent is not None else None)
