"""``Queue``, ``SimpleQueue`` and ``JoinableQueue`` between fiber processes on any hosts.

A queue's items are held by the hub of the process that made it. The original fiber's
names, for programs written for it: ``SimpleQueuePush`` (its ``SimpleQueue``), ``Pipe`` and
``ZConnection`` (the ends of a pipe) are this package's ``SimpleQueue``,
``fiber.connection.Pipe`` and ``fiber.connection.Connection``.
"""

# Inside: _queue: the queues (handles) and the service on the creator's hub that holds
# their items. _reader: in the creating process, a queue as a connection that
# multiprocessing.connection.wait can wait on (Queue._reader). _lending: items lent ahead
# to a consumer in another process (the hub's Loans, the consumer's Lease). _ends: the
# original fiber's SimpleQueuePush.reader and .writer.

from .._exports import publish
from ..connection import Connection as ZConnection
from ..connection import Pipe
from ._queue import JoinableQueue, Queue, SimpleQueue

SimpleQueuePush = SimpleQueue

__all__ = ["Queue", "SimpleQueue", "JoinableQueue", "Pipe", "SimpleQueuePush", "ZConnection"]

publish(__name__, Queue, SimpleQueue, JoinableQueue)
