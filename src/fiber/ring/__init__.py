"""Rings: N equal fiber jobs that form a group, as data-parallel training needs.

``fiber.Ring(size, func).run()`` runs ``func(rank, size)`` in ``size`` jobs with the
rendezvous of ``torch.distributed`` set in their environment and returns the results in
rank order (see `fiber.ring._ring` for the messages, `fiber.ring._member` for
the reserved port). ``fiber.experimental.Ring`` is the original fiber's interface, on this one.
"""

from __future__ import annotations

from .._exports import publish
from ..errors import RingError
from ._member import RingMember, current_member
from ._ring import Ring

__all__ = ["Ring", "RingError", "RingMember", "current_member"]

publish(__name__, Ring, RingMember)
