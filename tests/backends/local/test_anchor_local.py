"""A local job is handed its anchor (one end of a socket pair the hub serves from the
start) instead of connecting and authenticating: on both ways the local backend starts
a job (forked from the fork server's template, or a subprocess), and without leaving
the hub an end when a job never takes its own."""

from __future__ import annotations

import os
import sys
from typing import Any, List

import pytest

import fiber
from fiber._core import _runtime
from fiber.backends import JobSpec, register_backend
from fiber.backends.local import LocalBackend
from fiber.config import override
from fiber.errors import SubmitError
from fiber.testing.conformance.support.waiting import wait_until


def report_anchor(q: Any) -> None:
    """The job's anchor as the job sees it: the socket's peer name ('' for one end of a
    socket pair; an accepted connection's is the hub's listening address), what is left
    of the variables that handed it over, and the job's process id."""
    from fiber._core._clients import ensure_anchor
    from fiber.transport.client import process_id

    sock = ensure_anchor(os.environ[_runtime.PARENT_ENV]).sock
    q.put((sock.getpeername(), os.environ.get(_runtime.ANCHOR_FD_ENV),
           os.environ.get(_runtime.PROCESS_ID_ENV), process_id()))


def _ends_served() -> int:
    return len(_runtime.hub()._conns)


@pytest.mark.parametrize("fork_server", [True, False], ids=["forked", "subprocess"])
def test_a_local_job_is_handed_its_anchor(fork_server: bool) -> None:
    with override(local_fork_server=fork_server):
        q = fiber.SimpleQueue()
        procs = [fiber.Process(target=report_anchor, args=(q,)) for _ in range(3)]
        for p in procs:
            p.start()
        seen = [q.get() for _ in procs]
        for p in procs:
            p.join(60)
            assert p.exitcode == 0
    for peer, fd_var, id_var, pid in seen:
        assert peer in ("", b""), peer  # a socket pair: no connection to the listener
        assert fd_var is None and id_var is None  # taken out: its children get their own
        assert len(pid) == 16
    assert len({s[3] for s in seen}) == 3  # each job its own process id


def never_run() -> None:
    raise AssertionError("this target never runs")


class NeverStarts(LocalBackend):
    """A job that never runs fiber's bootstrap, so never takes its end of the pair."""

    name = "anchor-never-starts"

    def submit(self, specs: List[JobSpec]) -> Any:
        assert all(s.inherit for s in specs)  # handed over, then dropped here
        return super().submit([JobSpec(command=(sys.executable, "-c", "pass"), env=s.env)
                               for s in specs])


def test_the_hub_drops_the_end_of_a_job_that_never_took_its_own() -> None:
    register_backend(NeverStarts.name, NeverStarts)
    before = _ends_served()
    procs = [fiber.get_context(NeverStarts.name).Process(target=never_run)
             for _ in range(5)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    wait_until(lambda: _ends_served() <= before, 30,
               message="the hub still serves the ends of jobs that never took theirs")


def test_the_hub_drops_the_ends_of_jobs_that_could_not_be_submitted() -> None:
    before = _ends_served()
    with override(python="/nonexistent/python3", local_fork_server=False):
        for _ in range(3):
            with pytest.raises(SubmitError):
                fiber.Process(target=never_run).start()
    wait_until(lambda: _ends_served() <= before, 30,
               message="the hub still serves the ends of jobs never submitted")
