"""``close()`` while ``imap`` iterators are not exhausted: their input is read to its end
and queued, on a thread of its own, before the pool's idle workers are told to go. So
``multiprocessing``'s task handler does with every ``imap`` it took: a program that calls
``close()`` and ``join()`` before it iterates gets every result, not a window's."""

from __future__ import annotations

import threading
from typing import Callable, Iterable, List, Optional, Protocol

__all__ = ["Feeding", "start"]


class Feeding(Protocol):
    """An ``imap`` iterator (``IMapIterator``) as the pool's ``close()`` sees it."""

    @property
    def exhausted(self) -> bool:
        """Whether its input has been read to its end (or raised)."""

    def drain(self) -> None:
        """Read the rest of its input and submit it, whatever its consumer took."""


def start(imaps: Iterable[Feeding], then: Callable[[], None], lock: threading.RLock,
          wake: Callable[[], None]) -> Optional[threading.Thread]:
    """The thread that drains ``imaps`` not exhausted, then calls ``then()`` under
    ``lock`` and ``wake()``; None (and nothing done) when every one is exhausted."""
    feeding = [it for it in list(imaps) if not it.exhausted]
    if not feeding:
        return None
    thread = threading.Thread(target=_drain, args=(feeding, then, lock, wake),
                              name="fiber-pool-drain", daemon=True)
    thread.start()
    return thread


def _drain(feeding: List[Feeding], then: Callable[[], None], lock: threading.RLock,
           wake: Callable[[], None]) -> None:
    try:
        for it in feeding:
            it.drain()
    finally:  # (whatever it met: else the pool's workers would never be let go)
        feeding.clear()  # (not kept from collection meanwhile)
        with lock:
            then()
        wake()
