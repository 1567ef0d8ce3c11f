"""Locks, semaphores, events, conditions and barriers between fiber processes on any hosts.

Each object is served by the hub of the process that made it: waits and timeouts are
decided there, and a lock whose holder dies is released. ``BrokenBarrierError`` is the
standard library's (``threading``'s, as in ``multiprocessing``).
"""

# Inside: _primitives: Lock, RLock, Semaphore, BoundedSemaphore and their services on
# the creator's hub. _event: Event; _condition: Condition; _barrier: Barrier.

from threading import BrokenBarrierError

from .._exports import publish
from ._barrier import Barrier
from ._condition import Condition
from ._event import Event
from ._primitives import BoundedSemaphore, Lock, RLock, Semaphore

__all__ = ["Lock", "RLock", "Semaphore", "BoundedSemaphore", "Condition", "Event", "Barrier",
           "BrokenBarrierError"]

publish(__name__, Lock, RLock, Semaphore, BoundedSemaphore, Condition, Event, Barrier)
