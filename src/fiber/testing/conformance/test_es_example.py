"""examples/es_bipedal.py: OpenAI-ES on BipedalWalker-v3 (gymnasium with Box2D, which the
test extra installs on every supported Python and the container test image carries), with
tiny settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from .support import es_example
from .support.es_example import TINY

if TYPE_CHECKING:
    import types

    import fiber


@pytest.fixture(scope="module")
def es() -> Any:
    return es_example.load()


def test_es_improves_the_policy(ctx: fiber.FiberContext, es: types.ModuleType) -> None:
    result = es.main(TINY, context=ctx)
    history = result["history"]
    assert len(history) == 6
    assert all(h["steps"] > 0 and h["steps_per_s"] > 0 for h in history)
    assert not np.array_equal(result["theta_before"], result["theta_after"])
    assert result["reward_after"] > result["reward_before"], result


