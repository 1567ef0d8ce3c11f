"""TLS on a connection between hosts: a `TlsSocket` puts a TCP socket's bytes through an
``ssl.SSLObject`` over memory buffers, and offers the part of a socket's API that the
framing, `Client` and `Server` use, so that they serve it as they serve a plain socket
(the same descriptor in their selectors, the same non-blocking flags). The design:
docs/contributing/tls.md."""

from __future__ import annotations

import ipaddress
import select
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from .._process_state import here
from ..errors import AuthenticationError, TransportError

if TYPE_CHECKING:
    import ssl  # imported by the first TLS connection: import fiber does not pay for it

__all__ = ["TlsSocket", "Policy", "set_policy", "policy", "wanted", "wrap_client",
           "MODES", "Altered", "say_altered"]

#: ``off``: no connection is TLS; ``auto``: those between hosts (TCP to an address that
#: is not loopback); ``on``: every one (within one host too: TCP, not a Unix socket).
MODES = ("off", "auto", "on")
#: Bytes read from the socket at a time: what one TLS record holds at most, and more.
_READ = 256 * 1024
#: Plain bytes encrypted at a time by a non-blocking send (the rest on the next).
_WRITE = 256 * 1024
#: Bytes a peer may send before its handshake is done: a TLS 1.3 client's two flights
#: with a certificate chain take a few KB; a stranger costs this process no more.
_HANDSHAKE_MAX = 32 * 1024


class Altered(ConnectionResetError):
    """A record failed its integrity check: the stream was altered on its way (or the
    peer is broken). Nothing of it was given to the reader; the connection is over."""


def _altered(e: Exception) -> Altered:
    return Altered(f"a TLS record failed its check ({getattr(e, 'reason', None) or e}): "
                   "the stream was altered")


def say_altered(what: str, error: OSError) -> None:
    """Say on stderr that ``what`` happened because of ``error`` (an `Altered` record):
    an on-path host, or a broken link's corruption past TCP's checksum."""
    try:
        sys.stderr.write(f"fiber: {what}: {error}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


class Policy:
    """This process's TLS: its mode, and how it gets its contexts (made once, when first
    needed: see `fiber.transport.credentials`)."""

    def __init__(self, mode: str, server: Callable[[], ssl.SSLContext],
                 client: Callable[[], ssl.SSLContext]) -> None:
        if mode not in MODES:
            raise ValueError(f"tls must be one of {', '.join(MODES)}, not {mode!r}")
        self.mode = mode
        self._server = server
        self._client = client

    def context(self, server_side: bool) -> ssl.SSLContext:
        return self._server() if server_side else self._client()


def set_policy(new: Optional[Policy]) -> None:
    """Take ``new`` as this process's TLS (None: off): connections made from now on."""
    here.transport.tls = new


def policy() -> Optional[Policy]:
    """This process's TLS, if it is not off."""
    current: Optional[Policy] = here.transport.tls
    return current if current is not None and current.mode != "off" else None


def wanted(sock: socket.socket, mode: str) -> bool:
    """Whether connection ``sock`` (connected) is TLS under ``mode``. Both of its ends
    decide the same: a TCP connection is between loopback addresses at both ends or at
    neither."""
    if mode == "off" or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return False
    if mode == "on":
        return True
    try:
        host = sock.getpeername()[0]
        return not ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except (OSError, ValueError):
        return True


def wrap_client(sock: socket.socket, address: str, timeout: float) -> socket.socket:
    """``sock`` as this process's TLS has it: a `TlsSocket` whose handshake is done
    (within ``timeout``), or ``sock`` itself (plain).

    Raises:
        AuthenticationError: the server is not one of this program's (its certificate),
            or refused ours.
    """
    current = policy()
    if current is None or not wanted(sock, current.mode):
        return sock
    tls = TlsSocket(sock, current.context(server_side=False), server_side=False)
    tls.handshake(timeout, address)
    return tls  # type: ignore[return-value]


def _scratch() -> memoryview:
    """This thread's buffer for the encrypted bytes of one read (a connection's own would
    cost `_READ` bytes a connection; a thread reads one at a time)."""
    local = here.transport.tls_scratch
    buf: Optional[memoryview] = getattr(local, "buf", None)
    if buf is None:
        buf = local.buf = memoryview(bytearray(_READ))
    return buf


class TlsSocket:
    """A TCP socket whose bytes are TLS records. Reads and writes take what the socket
    holds and give back plain bytes, with the socket's own errors (``BlockingIOError``
    on a non-blocking socket or with ``MSG_DONTWAIT``), so that callers need only two
    more things: `pending` (plain bytes already read off the socket: a reader must take
    them before it waits on the descriptor again) and `drain` (encrypted bytes a
    non-blocking send left: a writer must see them written before it stops watching).

    Reads and writes may come from two threads (a queue's lease reads while others
    send): the ``SSLObject`` is only touched under a lock of its own, never while the
    socket blocks."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, server_side: bool) -> None:
        import ssl

        self._ssl = ssl
        self.sock = sock
        self.family = sock.family
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=server_side)
        self._lock = threading.Lock()
        #: Encrypted bytes a non-blocking send could not write yet, in order.
        self._backlog = bytearray()
        #: Encrypted bytes written to the socket, not taken by `take_written` yet (what
        #: the kernel's count of acknowledged bytes compares with: see `_resend`).
        self._written = 0
        self._fed = 0  # bytes read before the handshake was done
        #: The end or the altered record that a read met after some bytes, raised (or
        #: returned as 0) at the next.
        self._failed: Optional[Exception] = None
        self.handshaken = False

    # -- the handshake --------------------------------------------------------------------

    def handshake(self, timeout: float, address: str) -> None:
        """The client's handshake, on a blocking socket, within ``timeout``.

        Raises:
            AuthenticationError: the server is not of this program, or refused us.
            TransportError: no answer within ``timeout`` (a slow or lossy link).
            ConnectionError: the server closed the connection.
        """
        deadline = time.monotonic() + timeout
        while not self.handshake_step():
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise TransportError(f"no TLS handshake answer within {timeout} s", address)

    def handshake_step(self) -> bool:
        """Take the peer's handshake bytes that have come and write ours: True once the
        handshake is done, False while it waits for the peer.

        Raises:
            AuthenticationError: the peer is not of this program, or refused us.
            ConnectionError: the peer closed the connection.
        """
        try:
            with self._lock:
                self._tls.do_handshake()
            self.handshaken = True
        except self._ssl.SSLWantReadError:
            pass
        except self._ssl.SSLError as e:
            self._write_out()  # our alert, which tells the peer why
            raise AuthenticationError(f"TLS handshake failed: {e.reason or e}") from None
        self._write_out()
        if self.handshaken:
            return True
        scratch = _scratch()
        try:
            n = self.sock.recv_into(scratch, _HANDSHAKE_MAX + 1 - self._fed,
                                    socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        if not n:
            raise ConnectionResetError("the peer closed the connection in the TLS handshake")
        self._fed += n
        if self._fed > _HANDSHAKE_MAX:  # what a stranger sends costs at most this
            raise AuthenticationError("TLS handshake failed: more than a handshake's bytes")
        self._in.write(scratch[:n])
        return self.handshake_step()

    # -- reading --------------------------------------------------------------------------

    def recv_into(self, view: memoryview, nbytes: int = 0, flags: int = 0) -> int:
        """As ``socket.recv_into``: plain bytes into ``view``; 0 at the end of stream."""
        size = nbytes or len(view)
        tls, incoming = self._tls, self._in
        while True:
            # the object is asked only when it may have something: a want-read is an
            # exception, which costs more than the read (the usual read starts empty)
            if incoming.pending or tls.pending() or self._failed is not None:
                try:
                    with self._lock:
                        if self._failed is not None:
                            raise self._failed
                        got = int(tls.read(size, view))  # type: ignore[arg-type]
                        if got < size and (incoming.pending or tls.pending()):
                            got = self._more_records(view, got, size)
                        return got
                except self._ssl.SSLWantReadError:
                    pass
                except self._ssl.SSLZeroReturnError:  # the peer's close_notify
                    return 0
                except self._ssl.SSLError as e:  # an altered record: none of it is given
                    raise _altered(e) from None
            scratch = _scratch()
            n = self.sock.recv_into(scratch, _READ, flags)
            if not n:
                return 0
            incoming.write(scratch[:n])

    def _more_records(self, view: memoryview, got: int, size: int) -> int:
        """(Under the lock, after a read gave ``got`` bytes.) The next whole records the
        object holds, up to ``size`` bytes in all: one read gives one record (16 KB at
        most), and a large frame is read here, not a call of the reader a record. An end
        or an altered record met here is raised at the next read (`pending` says to
        make it at once), so that the bytes before it are given as they were."""
        tls, incoming = self._tls, self._in
        try:
            while got < size and (incoming.pending or tls.pending()):
                n = int(tls.read(size - got, view[got:]))  # type: ignore[arg-type]
                if not n:
                    break
                got += n
        except self._ssl.SSLWantReadError:
            pass
        except self._ssl.SSLZeroReturnError as e:
            self._failed = e
        except self._ssl.SSLError as e:
            self._failed = _altered(e)
        return got

    def pending(self) -> bool:
        """Whether bytes read off the socket wait here (plain, or part of a record), or
        an end met after some of them."""
        return bool(self._tls.pending() or self._in.pending or self._failed is not None)

    # -- writing --------------------------------------------------------------------------

    def _encrypt(self, data: Any) -> bytes:
        with self._lock:
            self._tls.write(data)
            return self._out.read()

    def sendall(self, data: Any) -> None:
        """As ``socket.sendall`` (a blocking socket)."""
        if len(data) > _WRITE:
            self.sendmsg((data,))
        else:  # a small message (the usual): one lock, one write
            self._write_blocking(self._encrypt(data))

    def sendmsg(self, buffers: Sequence[Any], ancillary: Sequence[Any] = (), *_: Any) -> int:
        """As ``socket.sendmsg`` on a blocking socket: every buffer is written (TLS
        carries no descriptors: ``ancillary`` must be empty). Encrypted and written
        `_WRITE` plain bytes at a time: a 10 MB frame's records are not gathered in
        memory first (the object's buffer would grow by copies to hold them all)."""
        if ancillary:
            raise ValueError("a TLS connection carries no descriptors")
        total = batch = 0
        for buf in buffers:
            view = memoryview(buf).cast("B")
            for start in range(0, len(view), _WRITE):
                with self._lock:
                    batch += self._tls.write(view[start:start + _WRITE])
                    out = self._out.read() if batch >= _WRITE else None
                if out is not None:
                    self._write_blocking(out)
                    total, batch = total + batch, 0
        if batch:
            with self._lock:
                out = self._out.read()
            self._write_blocking(out)
        return total + batch

    def _write_blocking(self, out: bytes) -> None:
        if self._backlog:
            out, self._backlog = bytes(self._backlog) + out, bytearray()
        self.sock.sendall(out)
        self._written += len(out)

    def send(self, data: Any) -> int:
        """As ``socket.send`` on a non-blocking socket: how many plain bytes were taken
        (encrypted; written, or kept for `drain`). Raises ``BlockingIOError`` while
        encrypted bytes of an earlier send wait."""
        if self._backlog and not self.drain():
            raise BlockingIOError("earlier records wait")
        view = memoryview(data)[:_WRITE]
        out = self._encrypt(view)
        sent = self._send_some(out)
        if sent < len(out):  # kept for `drain`: only what the socket did not take
            self._backlog += memoryview(out)[sent:]
        return len(view)

    def drain(self) -> bool:
        """Write what earlier sends left; True once nothing is left."""
        if self._backlog:
            del self._backlog[:self._send_some(self._backlog)]
        return not self._backlog

    def _send_some(self, out: Union[bytes, bytearray]) -> int:
        """What a non-blocking send of encrypted ``out`` wrote now (counted), maybe 0."""
        try:
            sent = self.sock.send(out)
        except (BlockingIOError, InterruptedError):
            return 0
        self._written += sent
        return sent

    def _write_out(self) -> None:
        """Write what the TLS object made outside a send (handshake, alerts)."""
        with self._lock:
            self._backlog += self._out.read()
        try:
            self.drain()
        except OSError:
            pass  # the read that follows says the connection is gone

    def take_written(self) -> int:
        """The encrypted bytes written since the last call."""
        written, self._written = self._written, 0
        return written

    # -- the rest is the socket's ------------------------------------------------------

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def __getattr__(self, name: str) -> Any:
        # setsockopt, getsockopt, getpeername, settimeout, setblocking, shutdown, dup...:
        # what is not about the bytes of the stream
        return getattr(self.sock, name)
