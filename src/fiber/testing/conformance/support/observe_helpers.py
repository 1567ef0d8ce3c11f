"""Targets for the jobs of the observe tests and of the backends' kill tests (importable
by the workers: fiber is installed where they run)."""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Optional, Tuple, Union

import fiber

if TYPE_CHECKING:
    from fiber.queues import Queue, SimpleQueue
    from fiber.synchronize import Event


def kill_own_worker_once(flag: Event, x: int) -> int:
    """The first task to run SIGKILLs its own worker (``flag``: an Event of the master);
    every task, that one again included, then returns ``x``."""
    if x == 2 and not flag.is_set():
        flag.set()
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    time.sleep(0.05)
    return x


def kill_own_worker(x: int) -> int:
    """A task that kills its worker each time it runs."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)
    return x


def chat(x: int) -> int:
    """Print a line to stdout and one to stderr, then return ``x``."""
    print(f"chat-out {x}")
    print(f"chat-err {x}", file=sys.stderr)
    return x


def long_line(x: int) -> int:
    """Print one line of 150 KB and more (``long_line_text(x)``), of characters of
    three bytes each: forwarded in pieces, it must arrive as one line, each character
    whole."""
    print(long_line_text(x), flush=True)
    return x


def long_line_text(x: int) -> str:
    return f"long {x} " + "\u20ac" * 50000 + f" end {x}"


def chat_named(x: int) -> Tuple[int, str]:
    """Say ``x`` on stdout (print, and on fd 1 itself, as native code does) and on
    stderr; return ``x`` and this worker's name."""
    print(f"named-out {x}")
    os.write(1, f"named-fd {x}\n".encode())
    print(f"named-err {x}", file=sys.stderr)
    return x, fiber.current_process().name


def last_words_then_die(flag: Event) -> str:
    """The first time (``flag``, an Event of the master, not set): write a line without
    its end on fd 1 and SIGKILL this worker; then: return."""
    if not flag.is_set():
        flag.set()
        os.write(1, b"last words of " + fiber.current_process().name.encode())
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    return "second try"


def say_then_exit(text: str, code: int) -> None:
    """Print ``text`` (no flush by hand) and end the process at once after it."""
    print(text)
    sys.stdout.flush()
    os._exit(code)


def say_without_newline(text: str) -> None:
    sys.stdout.write(text)


def write_fd(text: str) -> None:
    """Write to fd 1 itself, as native code or a subprocess does."""
    os.write(1, text.encode() + b"\n")


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def exit_task(code: Union[str, int, None]) -> None:
    sys.exit(code)


def say_then_wait(text: str, gate: Event) -> None:
    """Print ``text`` (nothing if it is empty) and wait (up to 120 s) for ``gate`` (an
    Event) before ending."""
    if text:
        print(text)
    if not gate.wait(120):
        raise RuntimeError("the gate was never opened")


def burst_then_exit(count: int, code: int) -> None:
    """Print ``count`` numbered lines and an unfinished one, and exit with ``code`` at once
    (sys.exit: the process ends right after writing)."""
    for i in range(count):
        print(f"burst {i}")
    sys.stdout.write("no newline at the end")
    sys.exit(code)


def helper_that_raises(text: str) -> None:
    raise KeyError(f"missing {text}")


def raise_in_helper(text: str) -> None:
    helper_that_raises(text)


def report_then_wait(started: Queue[str], gate: Event) -> str:
    """Put this worker's name on ``started`` (a queue), wait for ``gate``; the name."""
    import fiber

    name = fiber.current_process().name
    started.put(name)
    if not gate.wait(120):
        raise RuntimeError("the gate was never opened")
    return name


def wait_at(item: Tuple[int, Event, int]) -> int:
    """``item`` is ``(i, gate, n)``: item ``n`` waits for ``gate`` (an Event); returns ``i``."""
    i, gate, n = item
    if i == n and not gate.wait(120):
        raise RuntimeError("the gate was never opened")
    return i


def wait_if_last(item: Tuple[int, Event]) -> int:
    """``item`` is ``(i, gate)``: item 9 waits for ``gate``, the others 10 ms (a chunk of
    them is slow enough that workers hold one at a time and send its result at once);
    returns ``i``."""
    i, gate = item
    time.sleep(0.01)
    if i == 9 and not gate.wait(120):
        raise RuntimeError("the gate was never opened")
    return i


def own_names(out: SimpleQueue[Tuple[str, str]]) -> None:
    """Put this process's comm and command line (as ps shows them) on ``out``."""
    with open("/proc/self/comm") as f:
        comm = f.read().strip()
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read().split(b"\0")[0].decode()
    out.put((comm, cmdline))


def visible_gpus(out: SimpleQueue[Optional[str]]) -> None:
    out.put(os.environ.get("CUDA_VISIBLE_DEVICES"))


@fiber.meta(memory=96)
def hog() -> None:
    """Say so, then take 1 GiB, far above its job's 96 MB limit (the OOM killer ends it):
    the line must reach the master all the same."""
    print("hogging memory now", flush=True)
    chunks = []
    for _ in range(64):  # 1 GiB, page by page, far above the limit
        b = bytearray(16 * 2**20)
        b[::4096] = b"x" * len(b[::4096])
        chunks.append(b)


def hog_once(flag: Event, x: int) -> int:
    """Item 1, the first time (``flag``: an Event of the master), takes far more memory
    than its worker's limit; every item returns itself. Item 0 takes 50 ms: a task that
    long is not prefetched, so the worker holds item 1 alone when it is killed."""
    if x == 0:
        time.sleep(0.05)
    if x == 1 and not flag.is_set():
        flag.set()
        hog.__wrapped__()
    return x


def _end_abruptly(how: str) -> None:
    """End this process at once, without any of Python's own shutdown."""
    if how == "os._exit":
        os._exit(3)
    if how == "SIGKILL":
        os.kill(os.getpid(), signal.SIGKILL)
    if how == "segfault":
        import ctypes

        # the default action: a library's own handler (pygame's "parachute", preloaded by
        # the fork server's template after a test imported it) would make it SIGABRT
        signal.signal(signal.SIGSEGV, signal.SIG_DFL)
        ctypes.string_at(0)  # reads address 0: SIGSEGV in native code
    time.sleep(60)
    raise AssertionError(f"still alive after {how}")


def last_words(text: str, how: str) -> None:
    """Print ``text`` on stdout and on stderr (flushed; stdout with no end of line too),
    then end abruptly: ``how`` is "os._exit", "SIGKILL" or "segfault"."""
    print(f"{text} out", flush=True)
    print(f"{text} err", file=sys.stderr, flush=True)
    os.write(1, f"{text} fd1\n".encode())
    sys.stdout.write(f"{text} unfinished")
    sys.stdout.flush()
    _end_abruptly(how)


def last_words_task(text: str, how: str, flag: Event) -> str:
    """A pool task: its first run prints ``text`` and ends its worker abruptly (``flag``:
    an Event of the master); its run on the worker that replaces it returns ``text``."""
    if not flag.is_set():
        flag.set()
        last_words(text, how)
    return text
