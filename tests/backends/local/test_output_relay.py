"""The output relay of jobs that are not their parent's children (fiber.process._relay),
on real local processes (support.relayed_backend): what a job wrote before it ended
abruptly reaches the master and the job's log, the backend sees the job's own exit
status, signals the cluster sends the job's first process reach the job, and a job that
never prints makes no connection for its output. The cluster stages run the API suite,
these cases included, on Slurm, Docker and Kubernetes."""

from __future__ import annotations

import os
import re
import signal
from typing import List

import psutil
import pytest

import fiber
from fiber.backends import get_backend
from fiber.testing.conformance.support import observe_helpers as oh
from fiber.testing.conformance.support.waiting import wait_until

from support import relayed_backend

pytestmark = pytest.mark.timeout(240)

PREFIX = re.compile(r"^\((?P<name>[\w:-]+)@(?P<host>[^)\s]+)\) (?P<text>.*)$")


@pytest.fixture(scope="module")
def rctx():
    return fiber.get_context(relayed_backend.register())


def _texts(text: str, contains: str) -> List[str]:
    found = [PREFIX.match(line) for line in text.splitlines()]
    return [m.group("text") for m in found if m is not None and contains in m.group("text")]


@pytest.mark.parametrize("how,code", [("os._exit", 3), ("SIGKILL", -9), ("segfault", -11)])
def test_last_words_before_an_abrupt_end_reach_the_master_and_the_log(rctx, capfd, how, code):
    text = f"relayed {how}"
    p = rctx.Process(target=oh.last_words, args=(text, how))
    p.start()
    p.join(120)
    assert p.exitcode == code  # the relay ended as the job did: the backend saw that
    got = capfd.readouterr()
    assert _texts(got.out, text) == [f"{text} out", f"{text} fd1", f"{text} unfinished"]
    assert _texts(got.err, text) == [f"{text} err"]
    log = get_backend(relayed_backend.NAME).read_logs(p.job_id)
    for line in (f"{text} out", f"{text} err", f"{text} fd1", f"{text} unfinished"):
        assert line in log, log


def test_terminate_reaches_the_job_through_its_relay(rctx):
    """A cluster signals the job's first process (docker stop, a pod's deletion): the
    relay passes SIGTERM on, and the job ends by it."""
    gate = rctx.Event()
    p = rctx.Process(target=oh.say_then_wait, args=("waiting", gate))
    p.start()
    wait_until(lambda: len(psutil.Process(p.pid).children()) == 1, 60,
               message="the relay's job")
    job = psutil.Process(p.pid).children()[0]
    p.terminate()
    p.join(60)
    assert p.exitcode == -15
    wait_until(lambda: not job.is_running() or job.status() == psutil.STATUS_ZOMBIE, 30,
               message="the job to end")


def test_a_job_killed_alone_is_reported_and_its_relay_ends(rctx, capfd):
    """SIGKILL to the job itself (the OOM killer picks the largest process): the relay
    forwards what it wrote, and ends killed by the same signal."""
    gate = rctx.Event()
    p = rctx.Process(target=oh.say_then_wait, args=("before the kill", gate))
    p.start()
    seen = ""

    def printed() -> bool:
        nonlocal seen
        seen += capfd.readouterr().out
        return "before the kill" in seen

    wait_until(printed, 60, message="the job's line")
    (job,) = psutil.Process(p.pid).children()
    os.kill(job.pid, signal.SIGKILL)
    p.join(60)
    assert p.exitcode == -9
    assert _texts(seen, "before the kill") == ["before the kill"]


def test_a_pool_task_s_lines_come_before_its_result(rctx, capfd):
    """A worker waits, before it sends results, until its relay has passed on what the
    tasks printed."""
    with rctx.Pool(2) as pool:
        assert pool.map(oh.chat, range(8), chunksize=1) == list(range(8))
        got = capfd.readouterr()
        assert sorted(_texts(got.out, "chat-out")) == sorted(f"chat-out {i}" for i in range(8))
        assert sorted(_texts(got.err, "chat-err")) == sorted(f"chat-err {i}" for i in range(8))


def test_a_job_of_several_workers_lines_come_before_their_results(rctx, capfd):
    """The job waits, before it passes its workers' results on, until the master has
    printed what its relay sent (``output_sync``): the results go on another
    connection, which the master may read first."""
    with rctx.Pool(4, workers_per_job=2, cpu=0.25) as pool:
        got = dict(pool.map(oh.chat_named, range(8), chunksize=1))
        out = capfd.readouterr().out
        assert set(got) == set(range(8))
        assert sorted(_texts(out, "named-out")) == sorted(f"named-out {i}" for i in range(8))


def test_a_pool_tasks_last_words_before_its_worker_dies(rctx, capfd):
    flag = rctx.Event()
    with rctx.Pool(1) as pool:
        assert pool.apply(oh.last_words_task, ("relayed pool", "SIGKILL", flag)) == \
            "relayed pool"
    seen = ""

    def arrived() -> bool:
        nonlocal seen
        seen += capfd.readouterr().out
        return "relayed pool unfinished" in seen

    wait_until(arrived, 60, message="the lost worker's last line")
    assert _texts(seen, "relayed pool") == [
        "relayed pool out", "relayed pool fd1", "relayed pool unfinished"]


def _sockets(pid: int) -> int:
    fds = f"/proc/{pid}/fd"
    return sum(1 for fd in os.listdir(fds) if os.readlink(os.path.join(fds, fd)).startswith(
        "socket:"))


def test_a_relay_connects_only_when_its_job_writes(rctx, capfd):
    """Most pool workers never print: their relays make no connection (a thousand
    handshakes fewer for a pool's start)."""
    gate = rctx.Event()
    quiet = rctx.Process(target=oh.say_then_wait, args=("", gate))
    chatty = rctx.Process(target=oh.say_then_wait, args=("relay-hello", gate))
    quiet.start()
    chatty.start()
    try:
        seen = ""

        def printed() -> bool:
            nonlocal seen
            seen += capfd.readouterr().out
            return "relay-hello" in seen

        wait_until(printed, 60, message="the chatty job's line")
        assert _sockets(quiet.pid) == 0 and _sockets(chatty.pid) == 1
    finally:
        gate.set()
    for p in (quiet, chatty):
        p.join(60)
        assert p.exitcode == 0


@pytest.mark.parametrize("relayed", [False, True])
def test_a_line_longer_than_64_kib_arrives_whole(rctx, capfd, relayed):
    """A line of 150 KB (characters of three bytes) from a Process, and from two workers
    of one job, is forwarded in pieces and printed as one line each, with one prefix,
    every character whole, as a multiprocessing child's line is."""
    ctx = rctx if relayed else fiber.get_context("local")
    p = ctx.Process(target=oh.long_line, args=(7,))
    p.start()
    p.join(60)
    assert p.exitcode == 0
    with ctx.Pool(2, workers_per_job=2, cpu=0.5) as pool:
        assert pool.map(oh.long_line, [1, 2], chunksize=1) == [1, 2]
    out = capfd.readouterr().out
    texts = [m.group("text") for m in map(PREFIX.match, out.splitlines())
             if m is not None and m.group("text").startswith("long ")]
    assert sorted(texts) == [oh.long_line_text(x) for x in (1, 2, 7)], \
        [(t[:20], len(t), t[-10:]) for t in texts]
