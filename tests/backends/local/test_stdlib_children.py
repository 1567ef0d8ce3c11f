"""fiber objects handed to children of the standard library's ``multiprocessing``.

A fiber Pipe or SimpleQueue given to a multiprocessing child made the child die on
AuthenticationError (it had no program secret) and the parent's ``recv()`` wait for ever.
The child now inherits the secret: a forked child from the parent's memory (the secret is
made before the hub hands out its first address), a spawn or forkserver child with the
object, in the data multiprocessing sends it privately (as its own authkey).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = os.path.join(os.path.dirname(__file__), "stdlib_scripts", "hand_to_stdlib.py")


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_fiber_pipe_and_queue_work_in_a_multiprocessing_child(method):
    out = subprocess.run([sys.executable, SCRIPT, method], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "FIBER_BACKEND": "local"})
    assert out.stdout.splitlines() == ["pipe ok", "queue ok", "42", "exit 0"], out.stderr
    assert out.stderr == ""


def test_a_process_of_another_program_is_refused_clearly():
    from fiber.errors import AuthenticationError
    from fiber.transport import auth

    secret = auth.program_secret()
    auth.adopt_secret(secret)  # the same program: nothing happens
    with pytest.raises(AuthenticationError, match="another fiber program"):
        auth.adopt_secret(bytes(32) if secret != bytes(32) else b"\x01" * 32)
