"""What a local job inherits from a program started with interpreter flags (``python -O
... train.py --lr 0.1``): a settings module the workers import parses the program's
arguments, and they run under its flags, whether the fork server forks them or they start
as subprocesses (see fiber/testing/conformance/test_inheritance.py for what every
backend's jobs inherit)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from fiber.testing.conformance.support.programs import run_program

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inherit_scripts")


INTERPRETER = ["-O", "-B", "-s", "-W", "error::UserWarning", "-X", "utf8", "-X", "faulthandler"]


@pytest.mark.parametrize("fork_server", ["1", "0"])
def test_workers_see_the_argv_a_settings_module_parses_and_the_flags(fork_server):
    """``python -O ... train.py --lr 0.1``: a settings module imported by the workers parses
    0.1, not its default, and they run under the same interpreter flags and options (local
    backend, forked by the fork server or started as subprocesses)."""
    backend_name = "local"
    env = {**os.environ, "FIBER_LOCAL_FORK_SERVER": fork_server}
    out = run_program([sys.executable, *INTERPRETER, "train.py", "--lr", "0.1",
                       "--backend", backend_name], 180, cwd=SCRIPTS, env=env)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    master = seen["master"]
    assert master["lr"] == 0.1 and master["argv"] == ["train.py", "--lr", "0.1", "--backend",
                                                      backend_name]
    assert master["flags"] == [1, 1, 1, 1] and master["assert_stripped"]
    assert master["warnoptions"] == ["error::UserWarning"]
    assert {"utf8", "faulthandler"} <= set(master["xoptions"])
    for job in [*seen["workers"], seen["child"]]:
        assert job == master
