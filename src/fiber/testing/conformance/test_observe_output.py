"""What a job writes reaches the master, on every backend: each line on the
master's stdout or stderr, prefixed ``(name@host) ``, as it is written; nothing lost when
the job ends right after; the job's own log keeps everything; config keys turn the prefix
and the forwarding off. API tests (``ctx``): they run on local and netns here, and on
slurm, docker and kubernetes in CI (scripts/test)."""

from __future__ import annotations

import re
import time
from types import MappingProxyType
from typing import List

import pytest

import fiber
from fiber.backends import get_backend
from fiber.errors import BackendError

from .support import helpers
from .support import observe_helpers as oh

pytestmark = pytest.mark.timeout(240)

PREFIX = re.compile(r"^\((?P<name>[\w:-]+)@(?P<host>[^)\s]+)\) (?P<text>.*)$")


class _Captured:
    """The test process's captured stdout and stderr, accumulated across reads."""

    def __init__(self, capfd: pytest.CaptureFixture[str]) -> None:
        self._capfd = capfd
        self.out = self.err = ""

    def read(self) -> _Captured:
        got = self._capfd.readouterr()
        self.out += got.out
        self.err += got.err
        return self

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.read().out + self.err:
            assert time.monotonic() < deadline, f"{text!r} not seen:\n{self.out}{self.err}"
            time.sleep(0.05)


def _prefixed(text: str, contains: str) -> List[re.Match]:
    found = [PREFIX.match(line) for line in text.splitlines()]
    return [m for m in found if m is not None and contains in m.group("text")]


def test_a_pools_output_is_at_the_master_each_line_prefixed(ctx, capfd):
    with ctx.Pool(2) as pool:
        assert pool.map(oh.chat, range(6), chunksize=1) == list(range(6))
        status = pool.status()
    cap = _Captured(capfd).read()
    workers = {w.name: w.host for w in status.workers}
    for stream, word in ((cap.out, "chat-out"), (cap.err, "chat-err")):
        lines = _prefixed(stream, word)
        assert sorted(m.group("text") for m in lines) == [f"{word} {i}" for i in range(6)], \
            stream
        for m in lines:
            assert m.group("name") in workers, (m.group(0), workers)
            if workers[m.group("name")]:
                assert m.group("host") == workers[m.group("name")]


def test_a_job_of_several_workers_prefixes_each_line_with_its_worker(ctx, capfd):
    """Workers that share a job (``workers_per_job``) keep their own names on their
    lines, whichever way they write, and a task's lines are at the master before its
    result is."""
    with ctx.Pool(4, workers_per_job=2, cpu=0.25) as pool:
        got = dict(pool.map(oh.chat_named, range(8), chunksize=1))
        cap = _Captured(capfd).read()  # at once: no waiting for lines still on their way
    assert set(got) == set(range(8))
    for stream, word in ((cap.out, "named-out"), (cap.out, "named-fd"), (cap.err, "named-err")):
        lines = _prefixed(stream, word)
        assert sorted(m.group("text") for m in lines) == sorted(f"{word} {i}" for i in range(8))
        for m in lines:
            assert m.group("name") == got[int(m.group("text").split()[-1])], m.group(0)


def test_a_worker_killed_in_its_job_leaves_its_unfinished_line(ctx, capfd):
    died = ctx.Event()
    with ctx.Pool(2, workers_per_job=2, cpu=0.25) as pool:
        assert pool.apply(oh.last_words_then_die, (died,)) == "second try"
        cap = _Captured(capfd)
        cap.wait_for("last words of")
    lines = _prefixed(cap.out, "last words of")
    assert len(lines) == 1, cap.out
    assert lines[0].group("text") == f"last words of {lines[0].group('name')}"


def test_output_appears_as_it_is_written(ctx, capfd):
    """A line is at the master while the job still runs (line-buffered, not at its end)."""
    gate = ctx.Event()
    p = ctx.Process(target=oh.say_then_wait, args=("first line", gate))
    p.start()
    try:
        cap = _Captured(capfd)
        cap.wait_for("first line")
        assert p.is_alive()
        assert _prefixed(cap.out, "first line")[0].group("name") == p.name
    finally:
        gate.set()
        p.join(60)
    assert p.exitcode == 0


def test_nothing_is_lost_when_the_job_ends_right_after_writing(ctx, capfd):
    p = ctx.Process(target=oh.burst_then_exit, args=(500, 3))
    p.start()
    p.join(120)
    assert p.exitcode == 3
    cap = _Captured(capfd).read()
    lines = [m.group("text") for m in _prefixed(cap.out, "burst")]
    assert lines == [f"burst {i}" for i in range(500)]  # all of it, in order
    assert _prefixed(cap.out, "no newline at the end")  # the unfinished last line too


def test_writes_to_the_file_descriptors_are_forwarded_too(ctx, capfd):
    """Native code and subprocesses write to fd 1, not through sys.stdout."""
    p = ctx.Process(target=oh.write_fd, args=("written on fd 1",))
    p.start()
    p.join(60)
    assert _prefixed(_Captured(capfd).read().out, "written on fd 1")


def test_the_jobs_own_log_keeps_everything(ctx, backend_name, capfd):
    p = ctx.Process(target=oh.chat, args=(7,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    job_id = p.job_id
    assert _prefixed(_Captured(capfd).read().out, "chat-out 7")
    deadline = time.monotonic() + 60
    while True:  # a cluster's log may come a little after the job's end
        try:
            log = get_backend(backend_name).read_logs(job_id)
        except BackendError as e:  # Kubernetes: the job said its exit code to the master
            if time.monotonic() > deadline:  # before the kubelet told the API server that
                raise  # its container ran ("is waiting to start: ContainerCreating")
            log = str(e)
        if "chat-out 7" in log and "chat-err 7" in log or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "chat-out 7" in log and "chat-err 7" in log, log
    assert "(Process-" not in log  # the log has the job's own words, not the prefix


def test_the_prefix_can_be_turned_off(ctx, capfd):
    with fiber.config.override(output_prefix=False):
        p = ctx.Process(target=oh.chat, args=(8,))
        p.start()
        p.join(60)
    out = _Captured(capfd).read().out
    assert "chat-out 8\n" in out and not _prefixed(out, "chat-out 8")


def test_forwarding_can_be_turned_off(ctx, backend_name, capfd):
    with fiber.config.override(forward_output=False):
        p = ctx.Process(target=oh.chat, args=(9,))
        p.start()
        p.join(60)
    assert p.exitcode == 0
    out = _Captured(capfd).read().out
    assert not _prefixed(out, "chat-out 9")
    if get_backend(backend_name).jobs_share_host:  # it inherited the master's stdout
        assert "chat-out 9" in out
    else:  # only the job's own log has it
        assert "chat-out 9" not in out


def test_a_child_traceback_reaches_the_master_with_its_prefix(ctx, capfd):
    p = ctx.Process(target=helpers.raise_value_error, args=("kaboom-456",))
    p.start()
    p.join(60)
    assert p.exitcode == 1
    err = _Captured(capfd).read().err
    lines = [m.group("text") for m in (PREFIX.match(x) for x in err.splitlines()) if m]
    text = "\n".join(lines)
    assert f"Process {p.name}:" in text and "ValueError: kaboom-456" in text, err
    assert "raise ValueError(message)" in text  # the source line of the target
    assert "_process.py" not in text and "_bootstrap.py" not in text  # no fiber frames


ABRUPT_ENDS = ("os._exit", "SIGKILL", "segfault")
_SIGNALLED = MappingProxyType({"os._exit": 3, "SIGKILL": -9, "segfault": -11})


@pytest.mark.parametrize("how", ABRUPT_ENDS)
def test_a_jobs_last_words_before_an_abrupt_end_reach_the_master_and_its_log(
        ctx, backend_name, capfd, how):
    """Flushed lines written just before ``os._exit``, a SIGKILL or a segfault are at the
    master once ``join`` returns, in order within each stream, and in the job's log
    (the job's own thread would die with it: its pipes are read by a process that does
    not)."""
    text = f"last words {how}"
    p = ctx.Process(target=oh.last_words, args=(text, how))
    p.start()
    p.join(120)
    assert p.exitcode == _SIGNALLED[how]
    cap = _Captured(capfd).read()
    out = [m.group("text") for m in _prefixed(cap.out, text)]
    assert out == [f"{text} out", f"{text} fd1", f"{text} unfinished"], cap.out
    assert [m.group("text") for m in _prefixed(cap.err, text)] == [f"{text} err"], cap.err
    deadline = time.monotonic() + 60
    while True:  # a cluster's log may come a little after the job's end
        try:
            log = get_backend(backend_name).read_logs(p.job_id)
        except BackendError as e:
            log = str(e)
        if f"{text} unfinished" in log or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for line in (f"{text} out", f"{text} err", f"{text} fd1", f"{text} unfinished"):
        assert line in log, log


@pytest.mark.parametrize("how", ["os._exit", "SIGKILL"])
def test_a_pool_tasks_last_words_before_its_worker_dies_reach_the_master(ctx, capfd, how):
    """The task is run again on the worker that replaces the lost one; what the first run
    printed before the end is not lost."""
    text = f"pool last words {how}"
    flag = ctx.Event()
    with ctx.Pool(1) as pool:
        assert pool.apply(oh.last_words_task, (text, how, flag)) == text
    cap = _Captured(capfd)
    cap.wait_for(f"{text} unfinished")
    assert [m.group("text") for m in _prefixed(cap.out, text)] == [
        f"{text} out", f"{text} fd1", f"{text} unfinished"], cap.out
    assert [m.group("text") for m in _prefixed(cap.err, text)] == [f"{text} err"], cap.err
