"""examples/es_bipedal.py on the local backend alone: run as a script (with tiny settings),
its bad settings refused, and its fitness shaping (see the conformance suite's
fiber/testing/conformance/test_es_example.py for what every backend runs)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from fiber.testing.conformance.support import es_example
from fiber.testing.conformance.support.es_example import EXAMPLES, TINY

from support import REPO


@pytest.fixture(scope="module")
def es() -> Any:
    return es_example.load()


def test_es_runs_as_a_script() -> None:
    es_example.load()  # Box2D, or unusable
    env = {k: v for k, v in os.environ.items() if not k.startswith("FIBER_")}
    cp = subprocess.run([sys.executable, os.path.join(EXAMPLES, "es_bipedal.py"), *TINY[:-4],
                         "--iterations", "2"], capture_output=True, text=True, timeout=240,
                        env=env, cwd=REPO)
    assert cp.returncode == 0, cp.stderr
    assert cp.stdout.count("steps/s") == 2, cp.stdout
    assert "policy reward after" in cp.stdout


def test_es_rejects_bad_settings() -> None:
    cp = subprocess.run([sys.executable, os.path.join(EXAMPLES, "es_bipedal.py"),
                         "--pairs", "0"], capture_output=True, text=True, timeout=60)
    assert cp.returncode == 2 and "--pairs must be at least 1" in cp.stderr


def test_fitness_shaping_uses_ranks_only(es: Any) -> None:
    """Rank-based fitness shaping: ranks on [-0.5, 0.5], whatever the scale of rewards."""
    shaped = es.centered_ranks(np.array([[10.0, -3.0], [1e6, 0.5]]))
    assert np.allclose(shaped, [[1 / 6, -0.5], [0.5, -1 / 6]])
