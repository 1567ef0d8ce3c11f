"""The items of one queue on its hub, in queue order, also for those that come back.

Items leave the queue's front when they are got or lent to a consumer elsewhere
(`fiber.queues._lending`); lent items that a consumer gives back (recalled, or its lease
ended) return to the queue. They must return to *their place*, not to the very front:
two consumers each give back what they held, at different times, and the items of the
one that gives back second would otherwise go ahead of the first one's, although they
were put after them. A CI run lost items so: three readers that stop at a sentinel
(``None``, put once the writers had ended), the sentinels lent to one reader that had
just taken its own and given back at its exit, ahead of seven items another reader had
given back a moment before; the last reader took a sentinel, and the seven items stayed
in the queue (tests/backends/local/test_queue_lending_local.py: 14 rounds in 500 on a loaded
machine).

So every item has a position, its rank in put order: the items never taken out are a
deque whose first has position ``head`` (the next ``+1``, and so on, never stored), and
those that came back are kept apart, ``(position, frames)`` in order, all before
``head``. A put and a get on a queue nothing came back to cost what a deque's do, and a
counter.
"""

from __future__ import annotations

import collections
import heapq
from typing import Any, Deque, Iterable, List, Tuple

__all__ = ["Item", "QueueItems"]

#: An item with its position: ``(position, frames)``.
Item = Tuple[int, List[Any]]


class QueueItems:
    """A queue's items, in put order (see the module's docstring); under the hub's lock."""

    __slots__ = ("_tail", "_head", "_back")

    def __init__(self) -> None:
        self._tail: Deque[List[Any]] = collections.deque()  # positions head, head + 1...
        self._head = 0
        self._back: Deque[Item] = collections.deque()  # came back, in order, before head

    def __len__(self) -> int:
        return len(self._tail) + len(self._back)

    def __bool__(self) -> bool:
        return bool(self._tail) or bool(self._back)

    def lendable(self) -> bool:
        """Whether items may be lent now: some were never taken out, and none came back.
        What came back goes to ``get``s alone: lent, it could go to a consumer that took
        an item put after it already, its last (a sentinel), and that gives it back again
        at its end, when the others have taken theirs (the CI run above, once the items
        kept their places)."""
        return not self._back and bool(self._tail)

    def append(self, frames: List[Any]) -> None:
        """Put an item at the end."""
        self._tail.append(frames)

    def popleft(self) -> Item:
        """Take the first item out, with its position (to give it back to, if need be)."""
        if self._back:
            return self._back.popleft()
        self._head += 1
        return self._head - 1, self._tail.popleft()

    def give_back(self, items: Iterable[Item]) -> None:
        """Items taken out come back, each to its place."""
        back = sorted(items, key=_position)
        if back:
            self._back = collections.deque(heapq.merge(self._back, back, key=_position))

    def push_first(self, frames: List[Any]) -> None:
        """An item whose position is not known comes back ahead of all (a ``get``'s item
        that the reader gave back: it was the first when it was got)."""
        first = self._back[0][0] if self._back else self._head
        self._back.appendleft((first - 1, frames))


def _position(item: Item) -> int:
    return item[0]
