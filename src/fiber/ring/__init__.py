"""Rings: N equal fiber jobs that form a group, as data-parallel training needs.

``fiber.Ring(size, func).run()`` runs ``func(rank, size)`` in ``size`` jobs with the
rendezvous of ``torch.distributed`` set in their environment and returns the results in
rank order. ``fiber.experimental.Ring`` is the original fiber's interface, on this one.
"""

# Inside: _ring: Ring and the messages between the master and the members; _rendezvous:
# what the rendezvous is made of (addresses, the reserved port, interfaces, the plan);
# _member: what runs in a member (its half of the rendezvous, then the function).

from __future__ import annotations

from .._exports import publish
from ..errors import RingError
from ._member import RingMember, current_member
from ._ring import Ring

__all__ = ["Ring", "RingError", "RingMember", "current_member"]

publish(__name__, Ring, RingMember)
