"""How soon a Ring ends after one of its members is SIGKILLed.

    .venv/bin/python benchmarks/ring_failure.py [--backend local|netns] [--runs N] [--torch]

A ring of 4: rank 2 waits until the others block in a collective that cannot complete
without it (a fiber ``Barrier``; with ``--torch``, a gloo ``all_reduce``), notes the time
and SIGKILLs itself; the time is measured until ``Ring.run()`` raises ``RingError`` naming
rank 2, with every other member ended. ``netns`` needs root (members on 3 network-namespace
hosts). Prints the median and the maximum.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import fiber
from fiber.errors import RingError

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import ring_helpers as rh  # noqa: E402 - the members' functions, shared with the tests


def once(ctx: fiber.FiberContext, use_torch: bool) -> float:
    when = ctx.Queue()
    if use_torch:
        ring = fiber.Ring(4, rh.die_in_collective, args=(when,), context=ctx)
    else:
        ring = fiber.Ring(4, rh.kill_on, args=(2, ctx.Barrier(4), when), context=ctx,
                          torch_store=False)
    try:
        ring.run(timeout=300)
    except RingError as e:
        raised = time.time()
        assert e.rank == 2, e
    else:
        raise AssertionError("the ring did not fail")
    return raised - when.get(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="local")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--torch", action="store_true")
    args = parser.parse_args()
    hosts = None
    if args.backend == "netns":
        from fiber_ci.netns import Hosts, use_hosts

        hosts = Hosts(3).start()
        use_hosts(hosts)
        fiber.init(backend="netns", listen_host=hosts.root_ip)
    ctx = fiber.get_context(args.backend)
    try:
        times = [once(ctx, args.torch) for _ in range(args.runs)]
    finally:
        if hosts is not None:
            hosts.stop()
    what = "gloo all_reduce" if args.torch else "fiber Barrier"
    print(f"{args.backend}, ring of 4, others in a {what}: SIGKILL -> RingError median "
          f"{statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} runs")


if __name__ == "__main__":
    main()
