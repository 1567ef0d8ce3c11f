"""The items of one queue on its hub, in put order, also those that come back.

Items leave the front when they are got or lent (`fiber.queues._lending`); lent items that
a consumer gives back return to *their place*, ahead of every item put after them, not to
the very front (docs/contributing/queues.md says why). `QueueItems` is a deque of the
items' frames (its length, truth, ``append`` and ``popleft`` are the deque's own, as fast:
the hub's hot path); the first ``len(back)`` of them came back, and ``back`` holds their
positions, in order; the others' positions are not stored: the first of them has position
``head``, the next ``head + 1``, and so on.
"""

from __future__ import annotations

import collections
import heapq
from typing import TYPE_CHECKING, Deque, Iterable, Sequence, Tuple

from ..transport.serialization import Frame

__all__ = ["Item", "QueueItems"]

#: An item with its position: ``(position, frames)``.
Item = Tuple[int, Sequence[Frame]]


if TYPE_CHECKING:
    _Frames = Deque[Sequence[Frame]]
else:
    _Frames = collections.deque


class QueueItems(_Frames):
    """A queue's items' frames, in put order (see the module's docstring), with their
    positions; under the hub's lock. ``append`` puts an item at the end."""

    __slots__ = ("head", "back")

    def __init__(self) -> None:
        super().__init__()
        #: The position of the first item that never came back.
        self.head = 0
        #: The positions of the first items, those that came back (all before ``head``).
        self.back: Deque[int] = collections.deque()

    def take(self) -> Item:
        """Take the first item out, with its position (to give it back to, if need be)."""
        frames = self.popleft()
        if self.back:
            return self.back.popleft(), frames
        self.head += 1
        return self.head - 1, frames

    def lendable(self) -> bool:
        """Whether items may be lent now: some were never taken out, and none came back.
        What came back goes to ``get``s alone: lent, it could go to a consumer that took
        an item put after it already, its last (a sentinel), and that gives it back again
        at its end, when the others have taken theirs."""
        return not self.back and bool(self)

    def give_back(self, items: Iterable[Item]) -> None:
        """Items taken out come back, each to its place."""
        returning = sorted(items, key=_position)
        if not returning:
            return
        came_back = [(self.back.popleft(), self.popleft()) for _ in range(len(self.back))]
        for pos, frames in reversed(list(heapq.merge(came_back, returning, key=_position))):
            self.appendleft(frames)
            self.back.appendleft(pos)

    def push_first(self, frames: Sequence[Frame]) -> None:
        """An item whose position is not known comes back ahead of all (a ``get``'s item
        that the reader gave back: it was the first when it was got)."""
        self.back.appendleft((self.back[0] if self.back else self.head) - 1)
        self.appendleft(frames)


def _position(item: Item) -> int:
    return item[0]
