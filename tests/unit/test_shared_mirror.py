"""A host's mirror of `fiber.shared` data (fiber._core._shared): a thread that waits for
another thread's fetch is answered whatever that fetch meets. Real processes and hubs;
the publisher's far host is a name its store gives itself, and its first answer is
slowed down (a far link) so that the second thread asks meanwhile."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "shared_mirror_race.py")


def test_a_thread_waiting_for_a_mirror_that_another_host_holds_gets_the_data():
    """The publisher answers the first fetch "holder": the mirror is not made here, and
    the thread that waited for it fetches the data itself. (It was dropped with the
    entry, unanswered, and waited for ever.)"""
    done = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True,
                          timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, done.stdout + done.stderr
    result = json.loads(lines[-1])
    assert result == {"done": [True, True], "got": {"A": "xxxx", "B": "xxxx"}}, result
