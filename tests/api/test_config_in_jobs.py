"""The configuration travels to every job, on every backend."""

from __future__ import annotations

from fiber.config import override

from support import helpers


def test_config_travels_to_children(ctx):
    with override(pool_prefetch=17):
        q = ctx.Queue()
        p = ctx.Process(target=helpers.put_identity, args=(q,))
        p.start()
        _, _, _, prefetch = q.get(timeout=60)
        p.join(30)
    assert prefetch == 17
