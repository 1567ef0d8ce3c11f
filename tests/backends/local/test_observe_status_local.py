"""``fiber top`` reaches a program through its hub, with the program's secret (issue 19):
the file that gives the hub's address and the secret is this user's alone, a client
without the secret is refused, and a program that is not running is an error that says so.
The live view itself is tested on every backend in
fiber/testing/conformance/test_observe_status.py."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from fiber import _machine

from support.cli_helpers import fiber_cli

pytestmark = pytest.mark.timeout(240)


def test_the_program_file_is_private_and_the_hub_wants_the_secret(ctx):
    """fiber top reads the hub's address and the secret from a file of this user's alone;
    a client without the secret is refused by the hub (there is no other way in)."""
    ctx.Pool(1).terminate()  # the hub runs
    [info] = [i for i in _machine.programs() if i["pid"] == os.getpid()]
    path = os.path.join(_machine.user_dir(), "programs", f"{info['program']}.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(_machine.user_dir()).st_mode) == 0o700
    probe = ("from fiber.transport.client import Client\n"
             "from fiber.errors import AuthenticationError\n"
             "try:\n"
             f"    Client({info['address']!r}).request(b'status', b'get', timeout=10)\n"
             "except AuthenticationError as e:\n"
             "    print('refused:', e)\n")
    cp = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                        timeout=60, env={k: v for k, v in os.environ.items()
                                         if k != "FIBER_SECRET"})
    assert cp.stdout.startswith("refused:"), cp.stdout + cp.stderr


def test_fiber_top_says_which_programs_run_when_the_one_asked_does_not():
    cp = fiber_cli("top", "--once", "1", timeout=60)
    assert cp.returncode == 1
    assert "no running fiber program '1'" in cp.stderr
