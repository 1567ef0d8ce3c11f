"""scripts/floor-constraints, the constraints of the floor stage of scripts/test: each
runtime dependency and each integration's library (the extras it names) at the lowest
version pyproject.toml allows, the rest as requirements/constraints.txt pins it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Dict, List

import support

SCRIPT = os.path.join(support.REPO, "scripts", "floor-constraints")


def _pins() -> Dict[str, List[str]]:
    out = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    pins: Dict[str, List[str]] = {}
    for line in out.splitlines():
        m = re.match(r"([A-Za-z0-9_.-]+)==(\S+)", line)
        if m:
            pins.setdefault(m.group(1).lower(), []).append(m.group(2).rstrip(";"))
    return pins


def test_runtime_dependencies_and_integrations_are_at_their_floor():
    with open(os.path.join(support.REPO, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    floors = dict(re.findall(r'"(cloudpickle|joblib|optuna)>=([0-9.]+)"', pyproject))
    assert set(floors) == {"cloudpickle", "joblib", "optuna"}, floors
    pins = _pins()
    for name, floor in floors.items():
        assert pins[name] == [floor], (name, pins[name])  # the floor alone, no other pin
    assert len(pins["scikit-learn"]) >= 2  # the rest pinned per Python, as the file has it
