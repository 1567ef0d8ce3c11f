"""How a connection gets in to a server: accepted (paused while the process is out of
descriptors), its TLS handshake if this process's TLS wants one, then fiber's handshake
(`auth`), after which it is a peer. A mixin of `Server`, run by its thread under its
lock. The handshake: docs/contributing/transport.md, "Authentication"."""

from __future__ import annotations

import errno
import functools
import selectors
import socket
import sys
from typing import Callable, Dict, Iterator, Optional, Sequence, Tuple

from ..errors import AuthenticationError
from . import auth, tls
from .framing import Scratch
from .peers import Connection, Peer
from .serialization import Frame
from .sockets import open_file_limits, tune
from .strangers import Door
from .timers import Timer

__all__ = ["Admission"]

#: Seconds a listener is not watched after accept() ran out of descriptors (see _accept).
_ACCEPT_PAUSE_S = 0.5
#: What a listener's selector key holds (see `Server._on_event`).
LISTENER = object()


class Admission:
    """A server's side of connections until they are peers (see the module)."""

    address: str
    door: Door
    _sel: selectors.DefaultSelector
    _conns: Dict[int, Connection]
    _scratch: Scratch
    _heartbeat: Tuple[float, float]
    _id: bytes
    _peer_ids: Iterator[int]
    _open_of: Dict[bytes, int]
    _anchors: Dict[bytes, int]
    _gone: Dict[bytes, None]
    _stopping: bool
    _said_out_of_files: bool

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        raise NotImplementedError

    def _flush(self, conn: Connection, frames: Optional[Sequence[Frame]] = None) -> None:
        raise NotImplementedError

    def _close_conn(self, conn: Connection, notify: bool = True) -> None:
        raise NotImplementedError

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                sock, source = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE):
                    self._pause_accepting(listener, e)
                return  # e.g. ECONNABORTED: the next connection comes with the next event
            sock.setblocking(False)
            tune(sock, *self._heartbeat)
            secure = tls.policy()
            if secure is not None and tls.wanted(sock, secure.mode):
                try:
                    sock = tls.TlsSocket(sock, secure.context(server_side=True),
                                         server_side=True)  # type: ignore[assignment]
                except OSError as e:  # ssl.SSLError too
                    sock.close()
                    sys.stderr.write(f"fiber: {self.address} cannot serve TLS: {e}\n")
                    continue
            conn = Connection(sock, self._scratch)
            conn.source = source[0] if isinstance(source, tuple) else ""
            self._conns[sock.fileno()] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)
            self.call_later(self.door.ttl, self.door.arrived(conn))

    def _pause_accepting(self, listener: socket.socket, error: OSError) -> None:
        """Out of descriptors: the connection waits in the backlog, and its listener, which
        stays readable, would make this thread spin; it is watched again in
        ``_ACCEPT_PAUSE_S`` (connections closed meanwhile free some). Said once."""
        try:
            self._sel.unregister(listener)
        except (KeyError, ValueError):
            return
        if not self._said_out_of_files:
            self._said_out_of_files = True
            sys.stderr.write(f"fiber: {self.address} cannot accept connections: "
                             f"{error.strerror} ({open_file_limits()}); they wait until "
                             "descriptors are freed\n")
            sys.stderr.flush()
        self.call_later(_ACCEPT_PAUSE_S, functools.partial(self._resume_accepting, listener))

    def _resume_accepting(self, listener: socket.socket) -> None:
        if not self._stopping and listener.fileno() >= 0:
            self._sel.register(listener, selectors.EVENT_READ, LISTENER)

    def _say_altered(self, conn: Connection, error: OSError) -> None:
        """A TLS record of ``conn`` failed its check: it is closed, and said."""
        who = conn.peer.process_id.hex()[:8] if conn.peer is not None else "a stranger"
        tls.say_altered(f"{self.address} closed the connection of process {who} from "
                        f"{conn.source or 'this host'}", error)

    def _tls_handshake(self, conn: Connection) -> bool:
        """A step of ``conn``'s TLS handshake with what came: True once it is done (what
        came after it is read next). A peer without a certificate of this program is
        refused here, before a byte of fiber's own handshake is read."""
        sock: tls.TlsSocket = conn.sock  # type: ignore[assignment]
        try:
            done = sock.handshake_step()
        except AuthenticationError as e:
            self.door.refuse(conn, str(e))
            return False
        except OSError:
            self.door.dropped += 1
            self._close_conn(conn)
            return False
        self._flush(conn)  # what the handshake could not write yet
        return done and conn.sock.fileno() >= 0

    def _handshake(self, conn: Connection, frames: Sequence[Frame]) -> bool:
        """Take the client's next handshake message; False: close the connection."""
        handshake = conn.handshake
        reply, keep = handshake.step(frames, self._id)
        if keep and handshake.done:
            self._admit(conn, handshake.process_id, handshake.anchor)
            assert conn.peer is not None
            reply = auth.Admitted(conn.peer.peer_id).frames()  # (its id: see _resend)
        if reply:
            conn.outbox.add(reply)
            self._flush(conn)
        return keep

    def _admit(self, conn: Connection, process_id: bytes, anchor: bool) -> None:
        """``conn`` is a peer from now on (authenticated, or a socket pair's end)."""
        conn.reader.max_message = None
        conn.peer = Peer(next(self._peer_ids), process_id, anchor, conn)
        self._open_of[process_id] += 1
        self.door.left(conn)
        if anchor:
            self._anchors[process_id] += 1
            self._gone.pop(process_id, None)
