"""``Queue``, ``SimpleQueue`` and ``JoinableQueue`` between fiber processes on any hosts.

- :mod:`._queue`: the queues (handles) and the service on the creator's hub that holds
  their items.
- :mod:`._reader`: in the creating process, a queue as a connection that
  ``multiprocessing.connection.wait`` can wait on (``Queue._reader``).
"""

from .._exports import publish
from ._queue import JoinableQueue, Queue, SimpleQueue

__all__ = ["Queue", "SimpleQueue", "JoinableQueue"]

publish(__name__, Queue, SimpleQueue, JoinableQueue)
