"""Locks, semaphores, events, conditions and barriers between fiber processes on any hosts.

- `_primitives`: ``Lock``, ``RLock``, ``Semaphore``, ``BoundedSemaphore``, ``Event``
  and their services on the creator's hub.
- `_condition`: ``Condition``; `_barrier`: ``Barrier``.
"""

from threading import BrokenBarrierError

from .._exports import publish
from ._barrier import Barrier
from ._condition import Condition
from ._primitives import BoundedSemaphore, Event, Lock, RLock, Semaphore

__all__ = ["Lock", "RLock", "Semaphore", "BoundedSemaphore", "Condition", "Event", "Barrier",
           "BrokenBarrierError"]

publish(__name__, Lock, RLock, Semaphore, BoundedSemaphore, Condition, Event, Barrier)
