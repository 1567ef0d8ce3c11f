"""Interfaces of the original fiber kept for the programs written for it.

``fiber.experimental.Ring(processes, func, initializer, initargs=None)`` keeps the original
interface on top of ``fiber.Ring``, which new programs use.
"""

from __future__ import annotations

from .._exports import publish
from ._ring import Ring, RingNode

__all__ = ["Ring", "RingNode"]

publish(__name__, Ring, RingNode)
