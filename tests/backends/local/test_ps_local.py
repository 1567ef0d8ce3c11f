"""``fiber ps`` on the local backend shows what is true (issue 26): a job killed by a signal
is ``ended (SIGKILL)``, never ``running``, whether its parent has waited for it yet or not;
jobs that have ended are listed with ``--all`` only; the records of ended jobs are pruned
(a day, 200 jobs at most), never those of a job or a program that runs.

Each test has a user directory of its own (``TMPDIR``): what other programs of this user
left in the shared one is not looked at, nor touched.
"""

from __future__ import annotations

import calendar
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

import psutil
import pytest

from fiber import _machine
from fiber.backends.local import _jobs
from fiber.testing.conformance.support.waiting import wait_until

from support.cli_helpers import MAIN, fiber_cli, tagged

pytestmark = pytest.mark.timeout(240)

SCRIPT = os.path.join(os.path.dirname(__file__), "observe_scripts", "sleeper_program.py")
DAY = 24 * 3600


def _env(tmp_path) -> Dict[str, str]:
    """The environment of a program, or a fiber command, whose user directory is under
    ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    env["TMPDIR"] = str(tmp_path)
    return env


def _rows(env: Dict[str, str], *args: str) -> Dict[str, List[str]]:
    """``fiber ps -b local ARGS...``: the row of each job it lists (job, program, state,
    created, name), by job id."""
    ps = fiber_cli("ps", "-b", "local", *args, env=env, timeout=60)
    assert ps.returncode == 0, ps.stderr
    rows = [re.split(r"\s{2,}", line.strip()) for line in ps.stdout.splitlines()[1:]]
    return {row[0]: row for row in rows}


def _states(env: Dict[str, str], *args: str) -> Dict[str, str]:
    """``fiber ps -b local ARGS...``: the state of each job it lists, by job id."""
    return {job: row[2] for job, row in _rows(env, *args).items()}


def test_a_job_killed_by_sigkill_is_listed_as_ended_by_it(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # (the test's timeout bounds it)
        assert line.startswith("READY "), line + proc.stderr.read()
        ready = tagged(line, "READY")
        program = str(proc.pid)
        states = _states(env, program)
        assert states[ready["job"]] == f"running (pid {ready['pid']})", states
        os.kill(ready["pid"], signal.SIGKILL)
        wait_until(lambda: _states(env, "--all", program).get(ready["job"])
                   == "ended (SIGKILL)", 60, interval=0.2,
                   message="fiber ps --all to list the job as ended (SIGKILL)")
        # without --all, what runs: the program, not its ended job
        assert list(_states(env, program)) == [program], _states(env, program)
        proc.kill()
        proc.wait(60)
        # once its program is gone too, the job's record still tells how it ended, and
        # the program's row that it was killed (reaped before fiber ps saw it end)
        assert _states(env, program) == {}
        assert _states(env, "--all", program) == {program: "ended (killed)",
                                                  ready["job"]: "ended (SIGKILL)"}
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_a_sigkilled_programs_row_stays_and_its_jobs_keep_their_creation_time(tmp_path):
    """A program killed by SIGKILL: its row stays (``--all``), ended by the signal when
    fiber ps sees it before its parent waits for it; its jobs' CREATED is when they were
    created, not when they ended (their logs' last write)."""
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, MAIN, "hold"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=env)
    program = str(proc.pid)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # a Pool(2), idle (the test's timeout bounds it)
        assert line.startswith("READY "), line + proc.stderr.read()
        before = _rows(env, "--all", program)
        assert before[program][2:] == [f"running (pid {proc.pid})", before[program][3],
                                       f"main: {MAIN} hold"], before
        workers = [job for job, row in before.items() if row[-1].startswith("PoolWorker-")]
        assert len(workers) == 2 and len(before) == 3, before
        created = {job: row[3] for job, row in before.items()}
        started = calendar.timegm(time.strptime(max(created.values()), "%Y-%m-%dT%H:%M:%SZ"))
        wait_until(lambda: time.time() >= started + 2, 10,
                   message="two seconds past the jobs' creation")
        os.kill(proc.pid, signal.SIGKILL)  # not waited for yet: a zombie
        wait_until(lambda: all(row[2].startswith("ended") for row in
                               _rows(env, "--all", program).values()), 60, interval=0.5,
                   message="fiber ps --all to list the program and its jobs as ended")
        after = _rows(env, "--all", program)
        assert after[program][2] == "ended (SIGKILL)", after
        assert {job: row[3] for job, row in after.items()} == created, (before, after)
        proc.wait(60)  # reaped: how it ended was kept when fiber ps first saw it
        final = _rows(env, "--all", program)
        assert final[program] == after[program], (after, final)
        # a job may be listed "ended" before its exit code is known, then "ended (exit
        # 1)" once it is (seen on a loaded machine): its row and creation stay
        assert {job: row[3] for job, row in final.items()} == created, (after, final)
        assert all(row[2].startswith("ended") for row in final.values()), final
        assert _states(env, program) == {}
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_a_program_that_exited_keeps_its_row(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, MAIN, "3"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err
    row = _rows(env, "--all")[str(proc.pid)]
    assert row[2:] == ["ended", row[3], f"main: {MAIN} 3"], row  # (exit 3: not known)
    assert _states(env) == {}


def _job_record(tmp_path, monkeypatch, pid: int) -> None:
    """A log and a record, in this test's user directory, of job ``12345-1`` (program
    12345, not running) whose process is ``pid``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    directory = os.path.join(_machine.user_dir(), "logs", "12345")
    os.makedirs(directory)
    log = os.path.join(directory, "12345-1-Killed.log")
    open(log, "w").close()
    _jobs.note_started(log, pid)


def _state(job_id: str) -> str:
    [job] = [j for j in _jobs.find_jobs("12345") if j.job_id == job_id]
    return job.state


def test_a_killed_job_its_parent_has_not_waited_for_is_ended(tmp_path, monkeypatch):
    """A zombie (its parent busy, or gone and this machine's init never waits, as in many
    containers) still has its pid and start in /proc: it was listed ``running (pid N)``.
    It is ended, and /proc still tells by which signal."""
    child = subprocess.Popen([sys.executable, "-c",
                              "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"])
    try:
        wait_until(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE, 60,
                   message="the child to end (not waited for)")
        _job_record(tmp_path, monkeypatch, child.pid)
        assert _state("12345-1") == "ended (SIGKILL)"
    finally:
        child.wait(60)
    assert _state("12345-1") == "ended"  # waited for: how it ended is not known here


def test_a_job_that_ended_before_it_was_recorded_is_ended(tmp_path, monkeypatch):
    """A job whose process was gone when its record was written had no start time in it,
    and the missing start of the missing process matched: ``running`` for ever."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(60)
    _job_record(tmp_path, monkeypatch, child.pid)
    assert _state("12345-1") == "ended"


def _ended_job(program: str, n: int, age_s: float) -> str:
    """A log and a record, in this test's user directory, of job ``<program>-<n>``,
    killed by SIGKILL and last written ``age_s`` seconds ago; its id."""
    directory = os.path.join(_machine.user_dir(), "logs", program)
    os.makedirs(directory, exist_ok=True)
    job = f"{program}-{n}"
    log = os.path.join(directory, f"{job}-Worker.log")
    open(log, "w").close()
    _jobs.note_ended(log, 999999, -signal.SIGKILL)
    when = time.time() - age_s
    for path in (log, os.path.join(directory, f"{job}.pid")):
        os.utime(path, (when, when))
    return job


def test_fiber_ps_prunes_ended_jobs_past_a_day_or_the_newest_200(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    recent = [_ended_job("111", n, 60 * n) for n in range(1, 206)]  # newest first
    for n in range(1, 4):
        _ended_job("222", n, 2 * DAY)
    # never pruned: a job that runs, an ended job of a program that runs (this test's
    # process, as the program's main), both 3 days old, and a job being started (a log
    # and no record yet)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        running = _ended_job("333", 1, 3 * DAY)
        _jobs.note_started(os.path.join(_machine.user_dir(), "logs", "333",
                                        "333-1-Worker.log"), sleeper.pid)
        kept = _ended_job("444", 1, 3 * DAY)
        os.makedirs(os.path.join(_machine.user_dir(), "programs"))
        with open(os.path.join(_machine.user_dir(), "programs", "444.json"), "w") as f:
            json.dump({"program": "444", "pid": os.getpid(), "argv": ["test"],
                       "start": _machine.process_start(os.getpid())}, f)
        open(os.path.join(_machine.user_dir(), "logs", "444", "444-2-Starting.log"),
             "w").close()
        states = _states(_env(tmp_path), "--all")
        assert states[running] == f"running (pid {sleeper.pid})"
    finally:
        sleeper.kill()
        sleeper.wait(60)
    assert set(states) == {*recent[:200], running, kept, "444-2", "444"}, sorted(states)
    assert states[kept] == "ended (SIGKILL)" and states["444"].startswith("running")
    logs = os.path.join(_machine.user_dir(), "logs")
    assert sorted(os.listdir(logs)) == ["111", "333", "444"]  # 222's files, and it, gone
    assert len(os.listdir(os.path.join(logs, "111"))) == 2 * 200  # logs and records


def test_a_program_that_records_jobs_prunes_ended_ones(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.path.join(_machine.user_dir(), "logs", "222")
    _ended_job("222", 1, 2 * DAY)
    env = _env(tmp_path)
    proc = subprocess.Popen([sys.executable, SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # (the test's timeout bounds it)
        assert line.startswith("READY "), line + proc.stderr.read()
        assert not os.path.exists(old)  # pruned when its Sleeper was recorded
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    # the next program within PRUNE_EVERY_S leaves the records be (the machine's were
    # pruned just now): only fiber ps prunes meanwhile
    later = os.path.join(_machine.user_dir(), "logs", "555")
    _ended_job("555", 1, 2 * DAY)
    proc = subprocess.Popen([sys.executable, SCRIPT], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("READY "), line + proc.stderr.read()
        assert os.path.exists(later)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    _jobs.find_jobs()  # what fiber ps does first
    assert not os.path.exists(later)
