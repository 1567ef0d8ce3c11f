"""``Pipe`` and ``Connection`` between fiber processes on any hosts, and ``wait``.

A pipe's messages are held by the hub of the process that made it. ``Listener``,
``Client``, ``deliver_challenge``, ``answer_challenge`` and ``families`` (the address
families a ``Listener`` takes on this platform) are the standard library's:
authenticated sockets between any two processes that know the address and the key (on any
hosts, with a TCP address), whose connections are ``multiprocessing``'s;
``AuthenticationError`` is fiber's (a subclass of ``multiprocessing``'s).
"""

# Inside: _pipe: a pipe's two ends and the service on its creator's hub that holds its
# channels. _wait: wait on many connections (and sentinels, sockets) at once, the caller's
# side; _watch: the hub's side. _fileno: Connection.fileno(), a descriptor readable while a
# message waits.

from multiprocessing import connection as _stdlib
from multiprocessing.connection import Client, Listener, answer_challenge, deliver_challenge
from typing import List

from .._exports import publish
from ..errors import AuthenticationError
from ._pipe import BufferTooShort, Connection, Pipe
from ._wait import wait

__all__ = ["Pipe", "Connection", "wait", "BufferTooShort", "Client", "Listener",
           "answer_challenge", "deliver_challenge", "AuthenticationError", "families"]

publish(__name__, Connection, BufferTooShort)

families: List[str] = vars(_stdlib)["families"]  # not in typeshed
