"""Shared set-up of the Grid Engine scenario scripts (run by tests/backends/sge/test_sge.py).

A scenario runs in a fresh interpreter (a process's hub binds once and the master may be
SIGKILLed), with the test cluster's ``SGE_ROOT`` in its environment. It prints one line
``RESULT <json>`` that the test checks; anything else is diagnostics. The scripts can be
run by hand the same way (``eval "$(scripts/sge-cluster.sh env)"`` first).
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
    if not os.environ.get("SGE_ROOT"):
        sys.exit("run by tests/backends/sge/test_sge.py: SGE_ROOT is not set")
    fiber.init(backend="sge", **config)


def result(**values: Any) -> None:
    print("RESULT " + json.dumps(values), flush=True)
