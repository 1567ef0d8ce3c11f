"""Shared set-up of the ssh scenario scripts (run by tests/backends/ssh/test_ssh.py).

A scenario runs in a fresh interpreter (a process's hub binds once and the master may be
SIGKILLed), with the hosts' settings in its environment (``FIBER_SSH_HOSTS``,
``FIBER_SSH_CONFIG``, ``FIBER_LISTEN_HOST``). It prints one line ``RESULT <json>`` that the
test checks; anything else is diagnostics.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fiber  # noqa: E402

#: Seconds any single blocking call of a scenario may wait.
TIMEOUT = 120.0


def setup(**config: Any) -> None:
    if not os.environ.get("FIBER_SSH_HOSTS"):
        sys.exit("run by tests/backends/ssh/test_ssh.py: FIBER_SSH_HOSTS is not set")
    fiber.init(backend="ssh", **config)


def result(**values: Any) -> None:
    print("RESULT " + json.dumps(values), flush=True)
