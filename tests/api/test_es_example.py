"""examples/es_bipedal.py: OpenAI-ES on BipedalWalker-v3 (gymnasium with Box2D, which the
test extra installs on every supported Python), with tiny settings."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

import support

ROOT = support.REPO
EXAMPLES = os.path.join(ROOT, "examples")
# Seed 2's initial policy falls within a few steps (reward about -120): ES must teach it
# to stay up in these 6 small iterations.
TINY = ["--iterations", "6", "--pairs", "12", "--max-steps", "60", "--noise-mb", "4",
        "--hidden", "8", "--processes", "3", "--init-scale", "1.0", "--seed", "2"]


@pytest.fixture(scope="module")
def es() -> Any:
    pytest.importorskip("Box2D", reason="Box2D (the test extra) is not installed")
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)  # the workers get this sys.path too
    import es_bipedal

    return es_bipedal


def test_es_improves_the_policy(ctx: Any, es: Any, backend_name: str) -> None:
    if backend_name in ("docker", "kubernetes"):
        pytest.skip("the container test image carries fiber's own dependencies only, not "
                    "gymnasium and Box2D (nor examples/)")
    result = es.main(TINY, context=ctx)
    history = result["history"]
    assert len(history) == 6
    assert all(h["steps"] > 0 and h["steps_per_s"] > 0 for h in history)
    assert not np.array_equal(result["theta_before"], result["theta_after"])
    assert result["reward_after"] > result["reward_before"], result


