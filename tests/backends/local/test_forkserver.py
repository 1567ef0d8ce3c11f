"""The local backend's fork server (fiber.backends.local._forkserver).

Jobs forked by the template must behave like subprocess jobs: exit codes (negative =
signal), status, wait and cancel; the subprocess path stays the fallback. These tests run
on the local backend whatever ``--backend`` the suite was given.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any, Optional

import psutil
import pytest

import fiber
from fiber._process_state import here
from fiber.backends import JobState, register_backend
from fiber.backends.local import LocalBackend, _forkserver
from fiber.backends.local._forkserver import ForkedJob
from fiber.testing.conformance.support.programs import run_program
from fiber.testing.conformance.support.waiting import gone, require, unusable

import support


@pytest.fixture(autouse=True)
def _fork_server_supported() -> None:
    """The fork server needs Linux with pidfds: without, these tests are unusable (a
    failure under CI=true, whose machine has them)."""
    if not _forkserver.supported():
        unusable("the fork server", "the fork server needs Linux with pidfds")


@pytest.fixture
def local() -> Any:
    return fiber.get_context("local")


# -- targets (imported by the jobs from this module) ------------------------------------


def exit_with(code: int) -> None:
    sys.exit(code)


def wait_for(q: Any) -> None:
    q.get()


def report_env(q: Any, name: str) -> None:
    q.put(os.environ.get(name))


def set_env_and_report(q: Any, name: str) -> None:
    os.environ[name] = "set by a job"
    q.put(os.environ.get(name))


def say(text: str) -> None:
    print(text, flush=True)


def numpy_draw(q: Any) -> None:
    import numpy

    q.put((int(numpy.random.randint(2**31)), float(numpy.random.standard_normal())))


# -- helpers ------------------------------------------------------------------------------


def _backend_proc(p: fiber.Process) -> Any:
    assert p._job is not None and p._job.handle is not None
    backend = p._job.backend
    assert isinstance(backend, LocalBackend)
    return backend.proc_of(p._job.handle)


def _forked(p: fiber.Process) -> bool:
    return isinstance(_backend_proc(p), ForkedJob)


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return gone(pid)


def _template_pid() -> Optional[int]:
    return _forkserver.server_pid()


def _stop_template() -> None:
    server = here.jobs.fork_server
    if server is not None and server.alive:
        server.close()


# -- exit codes ---------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 3])
def test_exit_codes_through_the_fork_server(local, code):
    p = local.Process(target=exit_with, args=(code,))
    p.start()
    assert _forked(p)
    p.join(60)
    assert p.exitcode == code
    st = p._job.backend.status([p._job.handle])[p._job.handle.job_id]
    assert st.state == (JobState.SUCCEEDED if code == 0 else JobState.FAILED)
    assert st.exitcode == code


@pytest.mark.parametrize("how,code", [("kill", -signal.SIGKILL),
                                      ("terminate", -signal.SIGTERM)])
def test_signals_through_the_fork_server(local, how, code):
    q = local.SimpleQueue()
    p = local.Process(target=wait_for, args=(q,))
    p.start()
    assert _forked(p)
    assert psutil.Process(p.pid).ppid() == _template_pid()  # the template is its parent
    assert p.is_alive()
    getattr(p, how)()
    p.join(60)
    assert p.exitcode == code
    assert not p.is_alive()
    assert f"exitcode=-{signal.Signals(-code).name}" in repr(p)


def test_backend_wait_and_cancel_of_a_forked_job(local):
    q = local.SimpleQueue()
    p = local.Process(target=wait_for, args=(q,))
    p.start()
    backend, handle = p._job.backend, p._job.handle
    assert backend.wait(handle, timeout=0.2) is None  # still running
    backend.cancel([handle], force=True)
    st = backend.wait(handle, timeout=30)
    assert st is not None and st.state == JobState.FAILED and st.exitcode == -signal.SIGKILL
    backend.cancel([handle], force=True)  # a finished job: nothing happens
    p.join(30)
    assert p.exitcode == -signal.SIGKILL


def test_exits_are_noticed_at_once(local):
    """The template's exit report wakes the watcher (no polling interval in between)."""
    latencies = []
    for _ in range(5):
        q = local.SimpleQueue()
        p = local.Process(target=wait_for, args=(q,))
        p.start()
        assert _forked(p)
        assert p.is_alive()
        t0 = time.monotonic()
        p.kill()
        p.join(30)
        latencies.append(time.monotonic() - t0)
        assert p.exitcode == -signal.SIGKILL
    assert min(latencies) < 0.5, latencies


# -- environment, stdio, preloading ---------------------------------------------------------


class MarkingBackend(LocalBackend):
    """Gives the next job (only) an extra environment variable."""

    name = "marking"
    mark: Optional[str] = None

    def submit(self, specs):  # type: ignore[no-untyped-def]
        import dataclasses

        if MarkingBackend.mark is not None:
            specs = [dataclasses.replace(s, env={**s.env, "FIBER_TEST_MARK": self.mark})
                     for s in specs]
            MarkingBackend.mark = None
        return super().submit(specs)


def test_a_jobs_environment_does_not_leak_into_the_next(local):
    register_backend("marking", MarkingBackend)
    ctx = fiber.get_context("marking")
    q = local.SimpleQueue()

    MarkingBackend.mark = "job one"
    p = ctx.Process(target=report_env, args=(q, "FIBER_TEST_MARK"))
    p.start()
    assert _forked(p)
    assert q.get() == "job one"
    p.join(60)

    p = ctx.Process(target=report_env, args=(q, "FIBER_TEST_MARK"))
    p.start()
    assert _forked(p)
    assert q.get() is None
    p.join(60)

    # A variable a job sets stays in that job; the master's environment is followed.
    p = local.Process(target=set_env_and_report, args=(q, "FIBER_TEST_SET"))
    p.start()
    assert q.get() == "set by a job"
    p.join(60)
    os.environ["FIBER_TEST_MASTER"] = "from the master"
    try:
        for name, expected in (("FIBER_TEST_SET", None),
                               ("FIBER_TEST_MASTER", "from the master")):
            p = local.Process(target=report_env, args=(q, name))
            p.start()
            assert _forked(p)
            assert q.get() == expected
            p.join(60)
    finally:
        del os.environ["FIBER_TEST_MASTER"]
    p = local.Process(target=report_env, args=(q, "FIBER_TEST_MASTER"))
    p.start()
    assert q.get() is None
    p.join(60)
    assert p.exitcode == 0


def test_forked_job_writes_to_the_masters_current_stdout(local, capfd):
    """The master's stdout/stderr at submit time, as a subprocess would inherit them,
    not those the template started with."""
    p = local.Process(target=say, args=("hello from a forked job",))
    p.start()
    assert _forked(p)
    p.join(60)
    assert p.exitcode == 0
    assert "hello from a forked job" in capfd.readouterr().out


CRASHING = textwrap.dedent("""
    import os, signal
    import fiber

    def crash_in_the_job():
        os.kill(os.getpid(), signal.SIGSEGV)

    if __name__ == "__main__":
        p = fiber.Process(target=crash_in_the_job)
        p.start()
        p.join(60)
        print("exitcode", p.exitcode)
""")


def test_a_forked_jobs_crash_dump_reaches_the_master_under_faulthandler(tmp_path):
    """A program run with faulthandler on (PYTHONFAULTHANDLER, as `run_program` sets it,
    or ``-X faulthandler``): a job that crashes dumps its threads, as a subprocess job
    does. (The template's children reset the handlers Python had not installed to the
    default, faulthandler's among them: the dump was lost.)"""
    program = tmp_path / "crashing.py"
    program.write_text(CRASHING, encoding="utf-8")
    done = run_program([sys.executable, str(program)], 120,
                       env={**os.environ, "FIBER_BACKEND": "local"})
    assert f"exitcode {-signal.SIGSEGV}" in done.stdout, done.stdout + done.stderr
    assert "Fatal Python error: Segmentation fault" in done.stderr, done.stderr
    assert "in crash_in_the_job" in done.stderr, done.stderr


def test_preloaded_numpy_is_reseeded_in_every_job(local):
    require("numpy")
    _stop_template()
    try:
        with fiber.config.override(local_preload="numpy"):
            q = local.SimpleQueue()
            draws = []
            for _ in range(2):
                p = local.Process(target=numpy_draw, args=(q,))
                p.start()
                assert _forked(p)
                draws.append(q.get())
                p.join(60)
                assert p.exitcode == 0
            assert here.jobs.fork_server is not None
            assert "numpy" in here.jobs.fork_server.preloaded
        # each job's own state: neither the integers nor the Gaussians (a cached one
        # would be the template's) repeat
        assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1], draws
    finally:
        _stop_template()


# -- fallbacks ----------------------------------------------------------------------------


def test_disabled_fork_server_starts_subprocesses(local):
    with fiber.config.override(local_fork_server=False):
        p = local.Process(target=exit_with, args=(3,))
        p.start()
        assert isinstance(_backend_proc(p), subprocess.Popen)
        assert psutil.Process(p.pid).ppid() == os.getpid()
        p.join(60)
        assert p.exitcode == 3
        q = local.SimpleQueue()
        p = local.Process(target=wait_for, args=(q,))
        p.start()
        assert not _forked(p)
        p.kill()
        p.join(60)
        assert p.exitcode == -signal.SIGKILL


def test_prepare_starts_the_fork_server_ahead_of_the_first_job():
    # what a manager of objects in jobs (AsyncManager) does before it reports ready, so
    # that its first object's job does not wait ~0.5 s for the fork server (issue 32: the
    # original fiber's test_async_manager_basic times four managers' first calls)
    code = textwrap.dedent("""
        from fiber.backends import get_backend
        from fiber.backends.local import _forkserver
        assert _forkserver.server_pid() is None
        get_backend("local").prepare()
        print(_forkserver.server_pid() is not None)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr


class PrefixedBackend(LocalBackend):
    name = "prefixed"

    def command_prefix(self, spec, index):  # type: ignore[no-untyped-def]
        return ["env"]


def test_other_commands_start_subprocesses():
    register_backend("prefixed", PrefixedBackend)
    p = fiber.get_context("prefixed").Process(target=exit_with, args=(4,))
    p.start()
    assert not _forked(p)
    p.join(60)
    assert p.exitcode == 4


def test_a_request_too_large_falls_back_to_a_subprocess(local):
    names = [f"FIBER_TEST_BIG_{i}" for i in range(20)]
    for name in names:
        os.environ[name] = "x" * 60_000
    try:
        p = local.Process(target=exit_with, args=(5,))
        p.start()
        assert not _forked(p)
        p.join(60)
        assert p.exitcode == 5
    finally:
        for name in names:
            del os.environ[name]
    p = local.Process(target=exit_with, args=(0,))
    p.start()
    assert _forked(p)  # the fork server is still in use
    p.join(60)


@pytest.mark.parametrize("module_body,why", [
    ("import os\nos._exit(9)\n", "exited with code 9 while starting"),
    ("import time\ntime.sleep(600)\n", "did not get ready within 2 s"),
    ("import threading, time\n"
     "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n",
     "started a thread"),
])
def test_a_template_that_cannot_start_falls_back_clearly(local, tmp_path, monkeypatch,
                                                         capfd, module_body, why):
    name = f"fiber_test_bad_preload_{abs(hash(why))}"
    (tmp_path / f"{name}.py").write_text(module_body)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_forkserver, "START_TIMEOUT", 2.0)
    _stop_template()
    try:
        with fiber.config.override(local_preload=name):
            t0 = time.monotonic()
            p = local.Process(target=exit_with, args=(6,))
            p.start()
            assert time.monotonic() - t0 < 30
            assert not _forked(p)
            p.join(60)
            assert p.exitcode == 6
            p = local.Process(target=exit_with, args=(0,))
            p.start()  # no second attempt in this process: straight to a subprocess
            assert not _forked(p)
            p.join(60)
        err = capfd.readouterr().err
        assert "fork server" in err and why in err and "as subprocesses" in err
    finally:
        here.jobs.fork_server_failed = None  # let the next tests use a fork server again
        for proc in psutil.Process().children():
            try:
                cmdline = proc.cmdline()
            except psutil.Error:  # gone meanwhile, or a zombie another test left
                continue
            if _forkserver.MODULE in cmdline:
                assert _wait_gone(proc.pid, 10), "a template that failed was left running"


# -- the template's life ------------------------------------------------------------------


def test_template_death_loses_its_jobs_and_the_next_job_starts_a_new_one(local):
    q = local.SimpleQueue()
    p = local.Process(target=wait_for, args=(q,))
    p.start()
    assert _forked(p)
    old = _template_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    assert _wait_gone(old, 10)
    assert p.is_alive()  # the job runs on: its lifeline is the master's hub
    q.put("go")
    p.join(30)
    assert not p.is_alive()
    st = p._job.backend.status([p._job.handle])[p._job.handle.job_id]
    assert st.state == JobState.LOST or st.exitcode == 0
    if st.state == JobState.LOST:
        assert "fork server" in st.reason and "SIGKILL" in st.reason
    assert p.exitcode == 0  # the job reported its own exit code to the master

    p2 = local.Process(target=exit_with, args=(7,))
    p2.start()
    assert _forked(p2)
    new = _template_pid()
    assert new is not None and new != old
    p2.join(60)
    assert p2.exitcode == 7


def test_template_death_with_a_job_killed_meanwhile(local):
    q = local.SimpleQueue()
    p = local.Process(target=wait_for, args=(q,))
    p.start()
    assert _forked(p)
    old = _template_pid()
    assert old is not None
    os.kill(old, signal.SIGKILL)
    assert _wait_gone(old, 10)
    p.kill()  # still exact: the master holds a pidfd of the job
    p.join(30)
    assert not p.is_alive()
    assert p.exitcode == -signal.SIGKILL


def _script(body: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)],
                            stdout=subprocess.PIPE, text=True,
                            env=support.subprocess_env())


_MASTER = """
    import sys, time
    import fiber
    from fiber.backends.local import _forkserver

    def nap(seconds):
        time.sleep(seconds)

    if __name__ == "__main__":
        p = fiber.Process(target=nap, args=(float(sys.argv[1]),))
        p.start()
        print(_forkserver.server_pid(), p.pid, flush=True)
        {end}
"""


def test_template_exits_when_the_master_exits():
    proc = _script(_MASTER.format(end="p.join()").replace('sys.argv[1]', '"0.2"'))
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        template, job = (int(w) for w in line.split())
        assert proc.wait(60) == 0
    finally:
        proc.kill()
        proc.wait()
    assert _wait_gone(job, 5)
    assert _wait_gone(template, 5), "the fork server outlived its master"


def test_template_and_jobs_end_when_the_master_is_killed():
    proc = _script(_MASTER.format(end="time.sleep(60)").replace('sys.argv[1]', '"60"'))
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        template, job = (int(w) for w in line.split())
        assert psutil.Process(job).ppid() == template
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        proc.kill()
        proc.wait()
    assert _wait_gone(template, 5), "the fork server outlived its master"
    assert _wait_gone(job, 5), "a forked job outlived its master"


def test_no_secret_on_any_command_line_or_in_the_templates_environment(local):
    q = local.SimpleQueue()
    p = local.Process(target=wait_for, args=(q,))
    p.start()
    assert _forked(p)
    try:
        secret = fiber.current_process().authkey.hex().encode()
        template = _template_pid()
        assert template is not None
        for pid in (template, p.pid):
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert secret not in f.read()
            with open(f"/proc/{pid}/environ", "rb") as f:  # the env the process began with
                assert secret not in f.read()
        with open(f"/proc/{template}/cmdline", "rb") as f:
            assert _forkserver.MODULE.encode() in f.read()
        with open(f"/proc/{template}/environ", "rb") as f:
            assert b"FIBER_SECRET" not in f.read()
    finally:
        q.put("go")
        p.join(60)
    assert p.exitcode == 0


def report_tls(q: Any) -> None:
    from fiber.transport import credentials

    q.put((fiber.config.get_config().tls, "FIBER_TLS_CREDENTIALS" in os.environ,
           credentials.program_credentials().fingerprint()))


def test_a_job_inherits_the_programs_tls_credentials(local):
    """With tls on, a job, forked or started, has the program's credentials (not its
    own) and the mode, and its environment no longer holds them."""
    from fiber.transport import credentials

    mine = credentials.program_credentials().fingerprint()
    for fork_server in (True, False):
        with fiber.config.override(tls="on", local_fork_server=fork_server):
            q = local.SimpleQueue()
            p = local.Process(target=report_tls, args=(q,))
            p.start()
            assert _forked(p) == fork_server
            assert q.get() == ("on", False, mine)
            p.join(60)
        assert p.exitcode == 0


def test_template_is_single_threaded_and_serves_nothing(local):
    p = local.Process(target=exit_with, args=(0,))
    p.start()
    p.join(60)
    template = _template_pid()
    assert template is not None
    t = psutil.Process(template)
    assert t.net_connections(kind="inet") == []
    assert t.num_threads() == 1 or "numpy" in (here.jobs.fork_server.preloaded
                                                if here.jobs.fork_server else [])


def report_main(q: Any) -> None:
    import __main__

    q.put((os.path.basename(__main__.__file__), __main__.__spec__.name,
           os.path.basename(sys.argv[0])))


def test_a_forked_job_has_the_main_module_of_a_new_interpreter(local):
    """A forked job's ``__main__`` is that of ``python -m`` of the bootstrap, as in a job
    started as a subprocess (the bootstrap's code is the template's module, not run
    again)."""
    seen = []
    for fork_server in (True, False):
        with fiber.config.override(local_fork_server=fork_server):
            q = local.SimpleQueue()
            p = local.Process(target=report_main, args=(q,))
            p.start()
            assert _forked(p) == fork_server
            seen.append(q.get())
            p.join(60)
            assert p.exitcode == 0
    # sys.argv: the program's (the launch payload's), as in every job
    assert seen[0] == seen[1] == ("_bootstrap.py", "fiber.process._bootstrap",
                                  os.path.basename(sys.argv[0])), seen
