"""examples/es_bipedal.py as the ES tests run it: its path, tiny settings, the module."""

from __future__ import annotations

import os
import sys
from typing import Any

from . import REPO, in_checkout
from .waiting import require

#: examples/ of fiber's checkout (None outside one).
EXAMPLES = os.path.join(REPO, "examples") if REPO else None
# Seed 2's initial policy falls within a few steps (reward about -120): ES must teach it
# to stay up in these 6 small iterations.
TINY = ("--iterations", "6", "--pairs", "12", "--max-steps", "60", "--noise-mb", "4",
        "--hidden", "8", "--processes", "3", "--init-scale", "1.0", "--seed", "2")


def load() -> Any:
    """The example's module (its directory put on sys.path, which the workers get too:
    the container backends' test settings mount examples/ at its own path, as tests/);
    Box2D missing makes the test unusable (a failure under CI=true); outside fiber's
    checkout, the test is skipped."""
    examples = in_checkout("examples")
    require("Box2D")
    if examples not in sys.path:
        sys.path.insert(0, examples)
    import es_bipedal

    return es_bipedal
