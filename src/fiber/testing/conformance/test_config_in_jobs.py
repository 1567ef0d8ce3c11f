"""The configuration travels to every job, on every backend."""

from __future__ import annotations

import os

from fiber.config import override

from .support import helpers


def test_config_travels_to_children(ctx):
    with override(pool_prefetch=17):
        q = ctx.Queue()
        p = ctx.Process(target=helpers.put_identity, args=(q,))
        p.start()
        _, _, _, prefetch = q.get(timeout=60)
        p.join(30)
    assert prefetch == 17


def test_a_jobs_connection_to_its_parent_has_the_programs_heartbeat(ctx):
    """fiber.init's heartbeat reaches the job's side of its lifeline too (it was the
    defaults' until the job had its program's config: a job on a slow link would have
    given up on its parent after 3 s, while the parent waited 11)."""
    with override(heartbeat_interval=2, heartbeat_timeout=11):
        q = ctx.Queue()
        p = ctx.Process(target=helpers.put_anchor_keepalive, args=(q,))
        p.start()
        family, idle_s, user_timeout_ms, net = q.get(timeout=60)
        p.join(30)
    if family == "unix":  # the hub's abstract Unix socket, which has no keepalive: only a
        # job in this network namespace reaches it (local's; docker's on the host network)
        assert net == os.readlink("/proc/self/ns/net"), net
    else:
        assert (family, idle_s, user_timeout_ms) == ("tcp", 2, 11000)
