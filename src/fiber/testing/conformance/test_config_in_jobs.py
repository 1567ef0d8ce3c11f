"""The configuration travels to every job, on every backend."""

from __future__ import annotations

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


def test_a_jobs_connection_to_its_parent_has_the_programs_heartbeat(ctx, backend_name):
    """fiber.init's heartbeat reaches the job's side of its lifeline too (it was the
    defaults' until the job had its program's config: a job on a slow link would have
    given up on its parent after 3 s, while the parent waited 11)."""
    with override(heartbeat_interval=2, heartbeat_timeout=11):
        q = ctx.Queue()
        p = ctx.Process(target=helpers.put_anchor_keepalive, args=(q,))
        p.start()
        family, idle_s, user_timeout_ms = q.get(timeout=60)
        p.join(30)
    if family == "unix":  # a Unix socket, which has no keepalive: jobs of this host
        # (local's socket pair; docker's on the host network with the parent's socket)
        assert backend_name in ("local", "docker"), backend_name
    else:
        assert (family, idle_s, user_timeout_ms) == ("tcp", 2, 11000)
