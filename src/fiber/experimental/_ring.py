"""``fiber.experimental.Ring``: the interface of the original fiber's Ring, on fiber.Ring.

Programs written for the original fiber (its ``examples/ring.py``) pass an ``initializer``
that sets up the group from ``ring.rank``, ``ring.size`` and ``ring.members[0].ip`` /
``.port``, then ``func(rank, size)`` trains. Here the rendezvous is done before the
initializer runs: every member is ``connected``, ``members[0]`` holds rank 0's address
and the port it reserved (not a random one that may be taken), and the environment of
`fiber.Ring` (``MASTER_ADDR``...) is set, so both the original initializers and a
plain ``dist.init_process_group(backend)`` work. Differences from the original: rank 0
is a fiber job like the others (not a local process), ``initargs`` are passed to the
initializer after the ring, a failed member raises `fiber.errors.RingError`
(the original joined silently), and ``run()`` returns the members' results.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

from ..meta import Resources, resources_of
from ..ring import Ring as _FiberRing
from ..ring import current_member

__all__ = ["Ring", "RingNode"]


class RingNode:
    """One member of the ring: its ``rank``, whether it has joined (``connected``), the
    address it is reached at (``ip``) and, for rank 0, the rendezvous ``port``."""

    def __init__(self, rank: int, connected: bool = False, ip: Optional[str] = None,
                 port: Optional[int] = None) -> None:
        self.rank = rank
        self.connected = connected
        self.ip = ip
        self.port = port

    def __repr__(self) -> str:
        return f"RingNode(rank={self.rank}, connected={self.connected}, ip={self.ip!r}, " \
               f"port={self.port!r})"


class Ring:
    """``processes`` members; each runs ``initializer(ring, *initargs)`` with ``ring.rank``
    set to its own rank, then ``func(rank, size)``. In the creating process ``rank`` is 0
    (as in the original) and ``members`` fill in when ``run()`` has formed the ring.

    Raises:
        TypeError, ValueError: ``processes`` is not an int >= 0, or a function is not
            callable.
    """

    def __init__(self, processes: int, func: Callable[[int, int], object],
                 initializer: Callable[..., object],
                 initargs: Optional[Sequence[object]] = None) -> None:
        if isinstance(processes, bool) or not isinstance(processes, int):
            raise TypeError(f"Ring processes must be an int, got {processes!r}")
        if processes < 0:
            raise ValueError(f"Ring processes must be at least 0, got {processes}")
        for label, f in (("func", func), ("initializer", initializer)):
            if not callable(f):
                raise TypeError(f"Ring {label} must be callable, got {f!r}")
        self.size = processes
        self.func = func
        self.initializer = initializer
        self.initargs = tuple(initargs or ())
        self.rank = 0
        self.members = [RingNode(i) for i in range(processes)]

    def run(self) -> List[Any]:
        """Run the ring; the members' return values in rank order ([] for 0 processes).

        Raises:
            RingError: a member failed (the others were ended).
        """
        if self.size == 0:
            return []
        res = resources_of(self.func) or Resources()  # @fiber.meta on func, as the original
        ring = _FiberRing(self.size, _Member(self), cpu=res.cpu, memory=res.memory_mb,
                          gpu=res.gpu)
        try:
            return ring.run()
        finally:
            if ring.hosts:
                self.members = _nodes(ring.hosts, ring.master_port)

    def _in_member(self, rank: int, size: int) -> object:
        me = current_member()
        if me is None:
            raise RuntimeError("fiber.experimental.Ring's member ran outside a ring")
        self.rank = rank
        self.members = _nodes(list(me.addresses), me.master_port)
        self.initializer(self, *self.initargs)
        return self.func(rank, size)


class _Member:
    """The function each member of the underlying fiber.Ring runs (picklable)."""

    def __init__(self, ring: Ring) -> None:
        self.ring = ring

    def __call__(self, rank: int, size: int) -> object:
        return self.ring._in_member(rank, size)  # noqa: SLF001 - this module's class


def _nodes(addresses: List[str], port: Optional[int]) -> List[RingNode]:
    return [RingNode(r, True, ip, port if r == 0 else None) for r, ip in enumerate(addresses)]
