"""A failing ``start()`` is an error, never a hang (issue 26): whatever fails after the
backend's submit ends the jobs it submitted, raises to the caller, and the program exits;
``log_file`` in a missing directory makes it, a path that cannot be written fails the
start before any job is submitted, and every process writes its own file. Each case is
a whole program, run as a subprocess with a deadline (an exit handler that waits for a
job for ever is what is tested)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from typing import Dict, List, Optional, Sequence

import psutil
import pytest

pytestmark = pytest.mark.timeout(180)

_DEADLINE_S = 90


def _run(tmp_path, source: str, *args: str, env: Optional[Dict[str, str]] = None
         ) -> subprocess.CompletedProcess:
    """Run ``source`` as a program in ``tmp_path``; fail (after killing what it started)
    if it has not ended within the deadline."""
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(source))
    base = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    proc = subprocess.Popen([sys.executable, str(script), *args], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**base, **(env or {})}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=_DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"the program did not end within {_DEADLINE_S} s\nstdout:\n{out}\n"
                    f"stderr:\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _running(pids: List[int]) -> List[int]:
    """Those of ``pids`` that are processes still running (a zombie has ended)."""
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def _said(out: str, key: str) -> str:
    """The rest of the program's stdout line that starts with ``key``."""
    lines = [line for line in out.splitlines() if line.split(" ")[0] == key]
    assert len(lines) == 1, out
    return lines[0][len(key) + 1:]


# -- a step after the submit fails ----------------------------------------------------------

_AFTER_SUBMIT = """
    import sys, threading, time
    import psutil
    import fiber
    from fiber.backends import get_backend
    from fiber.process import start_all

    N, FAILING = int(sys.argv[1]), int(sys.argv[2])  # FAILING: the 1-based job that fails
    backend = get_backend("local")
    submitted, watched = [], []
    real_submit, watcher = backend.submit, backend.watcher()
    real_watch = watcher.watch

    def submit(specs):
        handles = real_submit(specs)
        submitted.extend(h.pid for h in handles)
        return handles

    def watch(handle, on_exit):  # a step of start() after the backend's submit
        watched.append(handle)
        if len(watched) == FAILING:
            raise RuntimeError("injected: a step after the submit failed")
        real_watch(handle, on_exit)

    backend.submit, watcher.watch = submit, watch

    def forever():
        threading.Event().wait()

    def quick():
        pass

    def running(pid):
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    if __name__ == "__main__":
        procs = [fiber.Process(target=quick if i < FAILING - 1 else forever)
                 for i in range(N)]
        try:
            start_all(procs)
        except RuntimeError as e:
            print("RAISED", e, flush=True)
        print("SUBMITTED", *submitted, flush=True)
        deadline = time.monotonic() + 30
        while any(running(pid) for pid in submitted[FAILING - 1:]) and time.monotonic() < deadline:
            time.sleep(0.02)
        print("RUNNING", *[pid for pid in submitted[FAILING - 1:] if running(pid)], flush=True)
        for p in procs[:FAILING - 1]:
            p.join(30)
        print("STARTED", *[p.exitcode for p in procs], flush=True)
        print("CHILDREN", len(fiber.active_children()), flush=True)
"""


@pytest.mark.parametrize("n,failing", [(1, 1), (3, 2)])
def test_a_start_that_fails_after_the_submit_ends_its_jobs_and_the_program(tmp_path, n,
                                                                             failing):
    """The backend started the jobs, then a step of ``start()`` raised: the caller gets
    the error, the jobs from the failing one on are ended at once (none is left for the
    exit handler to wait for), those launched before it run as usual, and the program
    exits."""
    cp = _run(tmp_path, _AFTER_SUBMIT, str(n), str(failing))
    assert cp.returncode == 0, cp.stderr
    assert _said(cp.stdout, "RAISED") == "injected: a step after the submit failed"
    pids = [int(pid) for pid in _said(cp.stdout, "SUBMITTED").split()]
    assert len(pids) == n
    assert _said(cp.stdout, "RUNNING") == ""  # ended while the program went on
    # the ones launched ran and were joined; the others are not started, for the caller
    assert _said(cp.stdout, "STARTED").split() == ["0"] * (failing - 1) + ["None"] * (
        n - failing + 1)
    assert _said(cp.stdout, "CHILDREN") == "0"
    assert _running(pids) == []


# -- log_file ---------------------------------------------------------------------------------

_LOGGING = """
    import logging, sys
    import psutil
    import fiber

    def child():
        logging.getLogger("fiber").warning("a line of the child")

    def square(x):
        return x * x

    if __name__ == "__main__":
        try:
            fiber.init(log_file=sys.argv[1])
            p = fiber.Process(target=child)
            p.start()
        except fiber.errors.ConfigError as e:
            print("RAISED", e, flush=True)
            print("CHILDREN", len(psutil.Process().children(recursive=True)), flush=True)
            sys.exit(0)
        p.join(60)
        print("EXITCODE", p.exitcode, flush=True)
        with fiber.Pool(1) as pool:
            print("MAP", pool.map(square, [1, 2]), flush=True)
        logging.getLogger("fiber").warning("a line of the main process")
"""


def _logs(folder) -> Dict[str, str]:
    return {path.name: path.read_text() for path in folder.iterdir()}


def test_a_log_file_in_a_missing_folder_makes_it_and_every_process_has_its_file(tmp_path):
    cp = _run(tmp_path, _LOGGING, "logs/fiber.log")
    assert cp.returncode == 0, cp.stderr
    assert _said(cp.stdout, "EXITCODE") == "0"
    assert _said(cp.stdout, "MAP") == "[1, 4]"
    logs = _logs(tmp_path / "logs")
    assert sorted(logs) == ["fiber.log.MainProcess", "fiber.log.PoolWorker-1",
                            "fiber.log.Process-1"], logs
    assert "fiber Process-1[" in logs["fiber.log.Process-1"]
    assert "WARNING: a line of the child" in logs["fiber.log.Process-1"]
    assert "WARNING: a line of the main process" in logs["fiber.log.MainProcess"]
    assert "a line of the child" not in logs["fiber.log.MainProcess"]
    assert "WARNING" not in cp.stderr, cp.stderr  # the lines went to the files


def test_a_log_file_in_an_existing_folder_has_each_jobs_lines_in_its_file(tmp_path):
    """With ``debug``: the main process's lines about its jobs in its file, each job's own
    lines in its own file, nothing on stderr."""
    (tmp_path / "logs").mkdir()
    cp = _run(tmp_path, _LOGGING, str(tmp_path / "logs" / "fiber.log"),
              env={"FIBER_DEBUG": "1"})
    assert cp.returncode == 0, cp.stderr
    logs = _logs(tmp_path / "logs")
    assert sorted(logs) == ["fiber.log.MainProcess", "fiber.log.PoolWorker-1",
                            "fiber.log.Process-1"], logs
    assert "DEBUG: started Process-1 as local job" in logs["fiber.log.MainProcess"]
    assert "DEBUG: started PoolWorker-1" in logs["fiber.log.MainProcess"]
    assert "fiber Process-1[" in logs["fiber.log.Process-1"]
    assert "a line of the child" in logs["fiber.log.Process-1"]
    assert cp.stderr == ""


def test_a_log_file_that_cannot_be_written_fails_before_any_job(tmp_path):
    (tmp_path / "a-file").write_text("not a folder\n")
    cp = _run(tmp_path, _LOGGING, "a-file/logs/fiber.log")
    assert cp.returncode == 0, cp.stderr
    said = _said(cp.stdout, "RAISED")
    assert said == ("fiber config 'log_file' (from fiber.init): cannot make the folder "
                    "a-file/logs of fiber's log: a-file is not a folder; choose a path in a "
                    "folder you can write, or leave log_file empty for stderr"), said
    assert _said(cp.stdout, "CHILDREN") == "0"  # no job (nor the fork server) started
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "program.py"]
    assert cp.stderr == ""


_UNWRITABLE_LOG = """
    import sys
    import psutil
    import fiber

    def square(x):
        return x * x

    if __name__ == "__main__":
        step = "init"
        try:
            if sys.argv[1:]:
                fiber.init(log_file=sys.argv[1])
            step = "Pool"
            with fiber.Pool(2) as pool:
                step = "map"
                print("MAP", pool.map(square, [1, 2]), flush=True)
        except Exception as e:
            print("RAISED", step, type(e).__module__ + "." + type(e).__qualname__, e,
                  flush=True)
            print("CHILDREN", len(psutil.Process().children(recursive=True)), flush=True)
"""

#: Where log_file is set (the program's argument, a variable, the file), and the step of
#: the program that must raise: fiber.init, or the first Pool(), where the program
#: first reads the config.
_LOG_SOURCES = [
    ("fiber.init", ["/proc/fiber-log/fiber.log"], {}, "", "init"),
    ("FIBER_LOG_FILE", [], {"FIBER_LOG_FILE": "/proc/fiber-log/fiber.log"}, "", "Pool"),
    (".fiberconfig", [], {}, "log_file = /proc/fiber-log/fiber.log\n", "Pool"),
]


@pytest.mark.parametrize("where,args,env,file,step", _LOG_SOURCES,
                         ids=[source[0] for source in _LOG_SOURCES])
def test_a_log_file_that_cannot_be_written_is_one_config_error_where_it_was_set(
        tmp_path, where, args, env, file, step):
    """A pool's log file that cannot be written raised a BrokenPoolError or a
    RemoteError (a ConfigError, "remote") from ``map``, as the pool's thread that
    started the workers or the tasks it failed happened to meet it first, each after a
    line saying the log went to stderr. It is one ConfigError, where the program set the
    path or first read the config, every time (five runs), with nothing on stderr and no
    job started."""
    if file:
        (tmp_path / ".fiberconfig").write_text(file)
    for _ in range(5):
        cp = _run(tmp_path, _UNWRITABLE_LOG, *args, env=env)
        assert cp.returncode == 0, cp.stderr
        assert _said(cp.stdout, "RAISED") == (
            f"{step} fiber.errors.ConfigError fiber config 'log_file' (from {where}): cannot "
            "make the folder /proc/fiber-log of fiber's log in /proc (No such file or "
            "directory); choose a path in a folder you can write, or leave log_file empty "
            "for stderr"), cp.stdout
        assert _said(cp.stdout, "CHILDREN") == "0"
        assert cp.stderr == ""


def test_a_main_log_file_that_cannot_be_opened_fails_the_first_pool_every_time(tmp_path):
    """Its folder can be written, but not the main process's own file (a folder has its
    name): the file is opened in the caller's thread when the program starts fiber's
    machinery (its first ``Pool()``), before any thread of fiber's logs (which said on
    stderr that the log went there, and left the error to the pool's thread)."""
    (tmp_path / "logs" / "fiber.log.MainProcess").mkdir(parents=True)
    for _ in range(5):
        cp = _run(tmp_path, _UNWRITABLE_LOG, env={"FIBER_LOG_FILE": "logs/fiber.log"})
        assert cp.returncode == 0, cp.stderr
        assert _said(cp.stdout, "RAISED").startswith(
            "Pool fiber.errors.ConfigError fiber config 'log_file': cannot write fiber's log "
            "to logs/fiber.log.MainProcess: [Errno 21] Is a directory"), cp.stdout
        assert _said(cp.stdout, "CHILDREN") == "0"
        assert cp.stderr == ""


def _bootstrap(parent: str, prefix: Sequence[str] = ()) -> subprocess.Popen[str]:
    env = {**os.environ, "FIBER_PARENT": parent, "FIBER_JOB": "00" * 16}
    return subprocess.Popen([*prefix, sys.executable, "-m", "fiber.process._bootstrap"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.one_python  # fiber's retry, not the interpreter's: a 30 s timeout waited out
def test_a_job_whose_parent_cannot_be_reached_yet_tries_again():
    """A job may start before its network is up (a pod's): its first connection to its
    parent, whose host does not answer (here: a network namespace of its own, with no
    route), is tried again, said on its stderr, rather than ending the job at the first
    failure (a CI run saw a pod's first connect time out). Each try meets "no route"
    for its whole timeout (the default grace, 30 s: the program's config has not come
    yet), then says so and tries again."""
    import select
    import time

    job = _bootstrap("tcp://10.203.7.9:4242", ["unshare", "--net"])
    err = ""
    try:
        assert job.stderr is not None
        deadline = time.monotonic() + 45
        while "trying again" not in err and time.monotonic() < deadline:
            if select.select([job.stderr], [], [], 1.0)[0]:
                line = job.stderr.readline()
                if not line:
                    break
                err += line
        assert job.poll() is None, (job.returncode, err)  # still trying
    finally:
        job.kill()
        err += job.communicate(timeout=30)[1]
    tries = [ln for ln in err.splitlines() if "cannot connect" in ln and "trying again" in ln]
    assert len(tries) >= 1, err


def test_a_job_whose_parent_refuses_ends_at_once():
    """Refused: the parent is gone (killed while this job started). The job ends at once,
    exit code 1, and does not try again: it must not outlive its program."""
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free, and nothing listens on it once closed
    t = time.monotonic()
    job = _bootstrap(f"tcp://127.0.0.1:{port}")
    _, err = job.communicate(timeout=30)
    assert job.returncode == 1 and time.monotonic() - t < 10, err
    assert "cannot connect" in err and "trying again" not in err, err
