"""Running the ``fiber`` command in tests (the CLI tests of tests/backends/local, docker,
kubernetes and slurm): `fiber_cli` is the conformance suite's
(``fiber.testing.conformance.support.cli``), the rest is for ``fiber run`` and ``main_pool.py``."""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Any, Callable, Dict

from fiber.testing.conformance.support.cli import FIBER, fiber_cli
from fiber.testing.conformance.support.waiting import wait_until

__all__ = ["FIBER", "MAIN", "fiber_cli", "fiber_popen", "tagged", "started_job", "program_of",
           "ready_and_listed", "stop_program"]

MAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "main_pool.py")


def fiber_popen(*args: str) -> subprocess.Popen:
    """``fiber ARGS...`` started in a subprocess, its output piped."""
    return subprocess.Popen([*FIBER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def tagged(text: str, tag: str) -> Dict[str, Any]:
    """The JSON of the last ``TAG <json>`` line of a program's output."""
    lines = [ln for ln in text.splitlines() if ln.startswith(tag + " ")]
    assert lines, f"no {tag} line in the output:\n{text}"
    return dict(json.loads(lines[-1][len(tag) + 1:]))


def started_job(stderr: str) -> str:
    """The job id ``fiber run`` announced (``fiber: <job> started``)."""
    m = re.search(r"^fiber: (\S+) started", stderr, re.MULTILINE)
    assert m, f"fiber run did not say which job it started:\n{stderr}"
    return m.group(1)


def program_of(backend: str, job: str) -> str:
    """The program of ``job``, as ``fiber ps`` lists it."""
    ps = fiber_cli("ps", "-b", backend)
    assert ps.returncode == 0, ps.stderr
    programs = [ln.split()[1] for ln in ps.stdout.splitlines()[1:] if ln.split()[0] == job]
    assert programs, f"fiber ps does not list {job}:\n{ps.stdout}"
    return programs[0]


def ready_and_listed(backend: str, job: str, jobs: int, python: str = "python3"
                     ) -> Dict[str, Any]:
    """For a detached ``main_pool.py hold`` run with ``python``: wait for its READY line
    (``fiber logs``), check that ``fiber ps`` lists the program's ``jobs`` jobs, the main
    one named after its command; the READY json."""
    wait_until(lambda: "READY " in fiber_cli("logs", "-b", backend, job).stdout, 300,
               interval=1, message="the detached program's output")
    got = tagged(fiber_cli("logs", "-b", backend, job).stdout, "READY")
    program = program_of(backend, job)
    ps = fiber_cli("ps", "-b", backend, program)
    assert ps.returncode == 0, ps.stderr
    rows = [ln.split() for ln in ps.stdout.splitlines()[1:]]
    assert len(rows) == jobs and {row[1] for row in rows} == {program}, ps.stdout
    main_row = [ln for ln in ps.stdout.splitlines() if ln.startswith(job + " ")]
    assert main_row and f"fiber run: {python} {MAIN} hold" in main_row[0], ps.stdout
    return got


def stop_program(backend: str, target: str, gone: Callable[[], bool]) -> None:
    """``fiber stop TARGET`` (a program, or its main job) removes the program's jobs (``gone``
    says so); a second one finds none."""
    stop = fiber_cli("stop", "-b", backend, target)
    assert stop.returncode == 0 and re.search(r"removed [3-9] job", stop.stdout), stop
    wait_until(gone, 60, interval=0.5, message="the stopped program's jobs are removed")
    again = fiber_cli("stop", "-b", backend, target)
    assert again.returncode == 1 and "no fiber program or job" in again.stderr
