"""``Pipe`` and ``Connection`` between fiber processes on any hosts, and ``wait``.

- :mod:`._pipe`: a pipe's two ends and the service on its creator's hub that holds its
  channels.
- :mod:`._wait`: ``wait`` on many connections (and sentinels, sockets) at once.
"""

from .._exports import publish
from ._pipe import BufferTooShort, Connection, Pipe
from ._wait import wait

__all__ = ["Pipe", "Connection", "wait", "BufferTooShort"]

publish(__name__, Connection, BufferTooShort)
