"""Shared set-up of the Slurm scenario scripts (run by tests/backends/slurm/test_slurm.py).

A scenario runs in a fresh interpreter (a process's hub binds once and the master may be
SIGKILLed), with ``SLURM_CONF`` of the test cluster in its environment. It prints one line
``RESULT <json>`` that the test checks; anything else is diagnostics. The scripts can be
run by hand the same way (``eval "$(scripts/slurm-cluster.sh env)"`` first).
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
    if not os.environ.get("SLURM_CONF"):
        sys.exit("run by tests/backends/slurm/test_slurm.py: SLURM_CONF is not set")
    fiber.init(backend="slurm", **config)


def result(**values: Any) -> None:
    print("RESULT " + json.dumps(values), flush=True)
