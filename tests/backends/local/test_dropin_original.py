"""Programs written for the original fiber (``uber/fiber``) run unchanged (issue 16).

``tests/backends/local/original_fiber_scripts/`` holds programs written here in the style of the
original's examples (``basic_process``, ``basic_queue``, ``pi_estimation``, ``es.py``,
``async_manager.py``, ``shared_data``) and of its tests (``original_api.py``: its pool's
``error_handling``/``start_workers``/``wait_until_workers_up``, ``ResilientZPool``,
``fiber.queues.SimpleQueuePush``/``Pipe``/``ZConnection``, its config keys). Each runs as
its own program, as a user would run it: it must exit 0 with nothing on stderr (no
warning, no "job ... exits" line, no traceback), whatever it leaves to the interpreter's
exit (pools never closed, managers never shut down).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import fiber
import fiber.queues

SCRIPTS = os.path.join(os.path.dirname(__file__), "original_fiber_scripts")

EXPECTED = {
    "basic_process.py": ["Hello Fiber", "Done"],
    "basic_queue.py": ["42"],
    "pi_estimation.py": ["Pi is roughly"],
    "es.py": ["Result"],
    "async_manager.py": ["Sync manager took", "Async manager took"],
    "shared_data.py": ["2 2 ['master', 'child'] {'seen': True}", "7 56"],
    "original_api.py": ["original API OK"],
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_a_program_written_for_the_original_fiber(script, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)  # this fiber, as installed here
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, script)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    # what its processes print comes with their prefix, "(Process-1@host) "
    out = [re.sub(r"^\([^)]*@[^)]*\) ", "", line) for line in done.stdout.splitlines()]
    for expected in EXPECTED[script]:
        assert any(line.startswith(expected) for line in out), done.stdout


def test_the_original_queues_names(ctx):
    assert fiber.queues.SimpleQueuePush is fiber.SimpleQueue
    assert fiber.queues.ZConnection is fiber.connection.Connection
    a, b = fiber.queues.Pipe()
    assert isinstance(a, fiber.queues.ZConnection) and isinstance(b, fiber.queues.ZConnection)
    r, w = fiber.queues.Pipe(duplex=False)
    assert r.readable and not r.writable and w.writable and not w.readable
    q = ctx.SimpleQueue()
    assert isinstance(q, fiber.queues.SimpleQueuePush)
    from fiber.testing.conformance.support import dropin_helpers as dh

    p = ctx.Process(target=dh.send_later, args=(b, ["over the original's pipe"], 0))
    p.start()
    assert a.recv() == "over the original's pipe"
    p.join(60)


def relay_through_the_ends(q_in, q_out, n):
    """The original's test_queue.get_queue: it prints both ends, then relays n items."""
    print("relay started", q_in, q_in.reader, q_in.writer)
    for _ in range(n):
        q_out.writer.send(q_in.reader.recv())


def test_the_original_simple_queues_reader_and_writer(ctx):
    """``SimpleQueuePush.reader``/``.writer`` (the original's connections) in any process:
    ``recv()`` gets, ``send()`` puts; the wrong one for the end is an OSError."""
    q_in, q_out = ctx.SimpleQueue(), ctx.SimpleQueue()
    p = ctx.Process(target=relay_through_the_ends, args=(q_in, q_out, 5))
    p.start()
    for i in range(5):
        q_in.writer.send(i)
    assert [q_out.reader.recv() for _ in range(5)] == list(range(5))
    p.join(60)
    assert p.exitcode == 0
    assert "reader" in repr(q_in.reader) and q_in.reader.readable
    with pytest.raises(OSError):
        q_in.reader.send(1)
    with pytest.raises(OSError):
        q_in.writer.recv()
