"""Running the ``fiber`` command in a test (``fiber top`` in test_observe_status.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Dict, Optional

#: ``fiber`` as this interpreter runs it.
FIBER = (sys.executable, "-m", "fiber")


def fiber_cli(*args: str, timeout: float = 300,
              env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess[str]:
    """``fiber ARGS...`` in a subprocess, to its end; its output captured."""
    return subprocess.run([*FIBER, *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env)
