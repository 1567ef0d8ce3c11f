"""The ``fiber`` command on the local backend: ``fiber run`` follows a program and ends with
its exit code, Ctrl-C stops it, bad command lines and settings are clear errors. The same
command on Docker and Kubernetes is tested in tests/backends/docker and tests/backends/kubernetes.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

from fiber.testing.conformance.support.waiting import gone, wait_until

from support.cli_helpers import MAIN, fiber_cli, fiber_popen, started_job, tagged


def test_run_follows_a_program_with_a_pool_and_ends_with_its_exit_code():
    r = fiber_cli("run", "-c", "pool_prefetch=5", "--", sys.executable, MAIN, "3")
    assert r.returncode == 3, r.stderr
    got = tagged(r.stdout, "RESULT")
    assert got["squares"] == [x * x for x in range(20)]
    assert got["prefetch"] == 5  # the command's config reached the program
    assert got["main"].split(":")[1] not in {w.split(":")[1] for w in got["workers"]}
    assert f"{started_job(r.stderr)} failed: exit code 3" in r.stderr


def test_run_of_a_program_that_succeeds_is_quiet_and_exits_0():
    r = fiber_cli("run", sys.executable, "-c", "print('hello')")
    assert (r.returncode, r.stdout) == (0, "hello\n"), r.stderr
    assert "failed" not in r.stderr


def test_a_program_killed_by_a_signal_exits_128_plus_the_signal():
    r = fiber_cli("run", "--", sys.executable, "-c",
                  "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    assert r.returncode == 128 + signal.SIGKILL, r.stderr
    assert "SIGKILL" in r.stderr


def test_ctrl_c_stops_the_program_and_its_workers():
    proc = fiber_popen("run", "--", sys.executable, MAIN, "hold")
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), line + proc.stderr.read()
        got = tagged(line, "READY")
        pids = [int(w.split(":")[1]) for w in [got["main"], *got["workers"]]]
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        assert proc.returncode == 128 + signal.SIGTERM  # the program got SIGTERM
        assert "stopping" in proc.stderr.read()
        wait_until(lambda: all(gone(p) for p in pids), 30,
                   message="the program and its workers end")
    finally:
        proc.kill()
        proc.wait()


def test_env_option_reaches_the_program():
    r = fiber_cli("run", "-e", "FIBER_TEST_VALUE=a=b", "--", sys.executable, "-c",
                  "import os; print(os.environ['FIBER_TEST_VALUE'])")
    assert (r.returncode, r.stdout) == (0, "a=b\n"), r.stderr


def test_bad_command_lines_are_usage_errors():
    r = fiber_cli("run")
    assert r.returncode == 2 and "needs the command" in r.stderr
    r = fiber_cli("run", "-c", "pool_prefetch", "--", "true")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = fiber_cli("run", "-e", "NOVALUE", "--", "true")
    assert r.returncode == 2 and "NAME=VALUE" in r.stderr
    r = fiber_cli("frobnicate")
    assert r.returncode == 2 and "invalid choice" in r.stderr


def test_bad_settings_are_clear_errors():
    r = fiber_cli("run", "-c", "no_such_key=1", "--", "true")
    assert r.returncode == 1 and "unknown key" in r.stderr and "pool_prefetch" in r.stderr
    r = fiber_cli("run", "-c", "pool_prefetch=many", "--", "true")
    assert r.returncode == 1 and "expected a whole number (int)" in r.stderr
    r = fiber_cli("run", "-b", "no-such-backend", "--", "true")
    assert r.returncode == 1 and "no-such-backend" in r.stderr and "local" in r.stderr
    r = fiber_cli("run", "--", "/no/such/program")
    assert r.returncode != 0 and "/no/such/program" in r.stderr


def test_ps_logs_stop_say_what_they_do_not_find_on_local():
    """On local they see this user's programs on this machine (test_observe_local.py);
    a job or program that is not there is said to be missing."""
    r = fiber_cli("logs", "no-such-job")
    assert r.returncode == 1 and "no log of a local job 'no-such-job'" in r.stderr, r
    r = fiber_cli("stop", "no-such-program")
    assert r.returncode == 1 and "no fiber program or job named 'no-such-program'" in r.stderr


def test_the_fiber_command_is_installed():
    exe = shutil.which("fiber", path=os.path.dirname(sys.executable))
    assert exe is not None, "pip install did not install the fiber command"
    r = fiber_cli("--help")
    assert r.returncode == 0 and "run" in r.stdout and "stop" in r.stdout


def test_a_second_ctrl_c_kills_a_program_that_ignores_sigterm():
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('READY', flush=True); time.sleep(120)")
    proc = fiber_popen("run", "--", sys.executable, "-c", code)
    try:
        assert proc.stdout.readline() == "READY\n", proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        time.sleep(1)
        assert proc.poll() is None  # SIGTERM ignored: still running
        proc.send_signal(signal.SIGINT)
        proc.wait(60)
        assert proc.returncode == 128 + signal.SIGKILL, proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


def test_detach_on_the_local_backend_is_refused_before_anything_starts():
    r = fiber_cli("run", "--detach", "--", sys.executable, "-c", "print('ran')")
    assert r.returncode == 1 and "cannot leave a job running" in r.stderr
    assert "ran" not in r.stdout


def test_bad_resources_are_usage_errors_and_listen_host_stays_on_this_machine():
    r = fiber_cli("run", "--cpu", "0", "--", "true")
    assert r.returncode == 2 and "cpu must be positive" in r.stderr
    r = fiber_cli("run", "-c", "listen_host=127.0.0.1", "--", sys.executable, "-c",
                  "import fiber; print(fiber.config.get_config().listen_host)")
    assert (r.returncode, r.stdout) == (0, "127.0.0.1\n"), r.stderr


def test_attach_the_original_fibers_flag_is_the_default_follow():
    """``fiber run -a`` (the original's ``--attach``: follow the output) is what fiber run
    does anyway; with ``--detach`` it is a usage error."""
    for flag in ("-a", "--attach"):
        r = fiber_cli("run", flag, "--", sys.executable, "-c", "print('hello')")
        assert (r.returncode, r.stdout) == (0, "hello\n"), r.stderr
    r = fiber_cli("run", "-a", "-d", "--", "true")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr


def test_volume_on_a_backend_without_volumes_is_a_clear_error_before_anything_starts():
    r = fiber_cli("run", "-v", "data", "--", sys.executable, "-c", "print('ran')")
    assert r.returncode == 1, r.stderr
    assert "the local backend has no persistent volumes to mount" in r.stderr
    assert "usage:" not in r.stderr and "ran" not in r.stdout
