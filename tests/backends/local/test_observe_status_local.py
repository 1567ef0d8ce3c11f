"""``fiber top`` reaches a program through its hub, with the program's secret (issue 19):
the file that gives the hub's address and the secret is this user's alone, a client
without the secret is refused, and a program that is not running is an error that says so.
The live view itself is tested on every backend in
fiber/testing/conformance/test_observe_status.py."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import pytest

from fiber import _machine

from support.cli_helpers import fiber_cli

pytestmark = pytest.mark.timeout(240)

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs")


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


def test_fiber_top_with_its_output_not_a_terminal_prints_one_snapshot_and_exits_0(ctx):
    """Redirected or piped (``fiber top > file``, ``| grep``), fiber top prints one
    snapshot, without a screen's escape codes, and exits 0; its --help and docs/cli.md
    say so."""
    pool = ctx.Pool(1)
    try:
        [info] = [i for i in _machine.programs() if i["pid"] == os.getpid()]
        top = fiber_cli("top", info["program"], timeout=30)  # a refreshing top: timeout
    finally:
        pool.terminate()
        pool.join()
    assert top.returncode == 0, top.stderr
    assert top.stdout.count("fiber top — program") == 1 and "\x1b[" not in top.stdout, top
    assert re.search(r"^Pool 1 \(run, [01] of 1 workers\)", top.stdout, re.M), top.stdout
    said = ("With its output not a terminal (redirected to a file or a pipe) it prints one "
            "snapshot and exits 0, as with --once.")
    assert said in " ".join(fiber_cli("top", "--help", timeout=30).stdout.split())
    with open(os.path.join(DOCS, "cli.md"), encoding="utf-8") as f:
        page = " ".join(f.read().split("## `fiber top`")[1].split("\n## ")[0].split())
    assert "With its output not a terminal" in page and "prints one snapshot and exits " \
        "with status 0, as `--once` does" in page, page
