"""The per-process state of one layer: the transport's (`fiber.transport`), the connections'
(`fiber.connection`) and the hub's and its services' (`fiber._core`).
Its one instance is ``here.transport`` (`fiber._process_state`)."""

from __future__ import annotations

import collections
import itertools
import secrets
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, DefaultDict, Dict, List, Optional, Tuple

if TYPE_CHECKING:
    import mmap
    import ssl
    import types

    from ..transport._resend import Orphans
    from ..transport.client import Client
    from ..transport.credentials import Credentials
    from ..transport.local import OwnServer
    from ..transport.server import Server
    from ..transport.tls import Policy

__all__ = ["TransportState"]


class TransportState:
    """What this process keeps for that layer; each attribute says whose it is."""

    def __init__(self) -> None:
        # -- transport._by_value --
        #: (transport._by_value) code object -> the global names its instructions use
        #: (code objects are immutable: a cache).
        self.code_global_names: weakref.WeakKeyDictionary[types.CodeType, Tuple[str, ...]] = \
            weakref.WeakKeyDictionary()

        # -- transport._main_namespace --
        #: (transport._main_namespace) Where the source of a rebuilt function's file comes
        #: from when this host lacks the file: the process that sent it (None: nowhere).
        self.main_fetch_source: Optional[Callable[[str], Optional[str]]] = None
        #: (transport._main_namespace) The globals of every function of ``__main__``
        #: rebuilt in this process.
        self.main_namespace: Dict[str, Any] = {}
        #: (transport._main_namespace) Name -> the value last installed from a pickle (a
        #: strong reference: an identity check on an id could be fooled once it is gone).
        self.main_installed: Dict[str, Any] = {}
        #: (transport._main_namespace) Guards `main_namespace` and `main_installed`:
        #: several threads may unpickle at once (the hub's, a pool worker's, the user's).
        self.main_namespace_lock = threading.Lock()

        # -- transport._resend --
        #: (transport._resend) Guards `orphans` and `orphans_sending`.
        self.resend_lock = threading.Lock()
        #: (transport._resend) Address -> the orphans of its ended connections, to send
        #: first on the next connection to it.
        self.orphans: Dict[str, List[Orphans]] = {}
        #: (transport._resend) Address -> the lock held while a new connection to it sends
        #: its orphans: another new connection to it waits, not to overtake them.
        self.orphans_sending: DefaultDict[str, threading.Lock] = \
            collections.defaultdict(threading.Lock)

        # -- transport.auth --
        #: (transport.auth) Guards `secret`.
        self.secret_lock = threading.Lock()
        #: (transport.auth) This program's secret: inherited, adopted or made on first use
        #: (None until then).
        self.secret: Optional[bytes] = None

        # -- transport.tls --
        #: (transport.tls) This process's TLS (mode and contexts); None: off.
        self.tls: Optional[Policy] = None
        #: (transport.tls) .buf: this thread's buffer for a read's encrypted bytes.
        self.tls_scratch = threading.local()

        # -- transport.client --
        #: (transport.client) A random id of this process, unique across every host of the
        #: program (renewed in a forked child, or adopted with an anchor).
        self.process_id: bytes = secrets.token_bytes(16)
        #: (transport.client) Addresses whose connection timed out, and when
        #: (`time.monotonic`).
        self.timed_out: Dict[str, float] = {}
        #: (transport.client) .clients: this thread's channels, by address.
        self.thread_clients = threading.local()
        #: (transport.client) Every connection made here and not collected (pruned once its
        #: server is gone).
        self.all_clients: weakref.WeakSet[Client] = weakref.WeakSet()
        #: (transport.client) Each connection that carried a message without a reply (a
        #: put), with the thread that sent it: kept open until `sync_unanswered` (its
        #: ``unanswered``: no reply on it since, which that asks for) lets it go.
        self.unanswered: Dict[Client, threading.Thread] = {}
        #: (transport.client) Guards `unanswered`.
        self.unanswered_lock = threading.Lock()
        #: (transport.client) Address -> this process's anchor to that server.
        self.anchors: Dict[str, Client] = {}
        #: (transport.client) Guards `anchors`, and an anchor's taking by a thread.
        self.anchor_lock = threading.Lock()

        # -- transport.credentials --
        #: (transport.credentials) Guards `tls_credentials` and `tls_contexts` (renewed in a
        #: forked child).
        self.tls_lock = threading.Lock()
        #: (transport.credentials) This program's throwaway TLS credentials: inherited, or
        #: made on first use (None until then); a forked child keeps them.
        self.tls_credentials: Optional[Credentials] = None
        #: (transport.credentials) (server side?, the site's files or None) -> the context
        #: made of them (dropped in a forked child, emptied for tests).
        self.tls_contexts: Dict[Tuple[bool, Optional[Tuple[str, str, str]]],
                                ssl.SSLContext] = {}

        # -- transport.cpus --
        #: (transport.cpus) This process's descriptor of ``/proc/loadavg``: None until
        #: opened (and in a forked child, until it opens its own); -1: there is none.
        self.loadavg: Optional[int] = None
        #: (transport.cpus) ``[seconds]``: wall time this process's threads spent in
        #: ``poll()`` after a miss.
        self.cpus_polled: List[float] = [0.0]

        # -- transport.local --
        #: (transport.local) Address -> this process's own server there (its calls go to
        #: it directly).
        self.local_servers: Dict[str, OwnServer] = {}

        # -- transport.memfd --
        #: (transport.memfd) Guards `memfd_kept` and `memfd_sealed`; reentrant: a mapping
        #: may be freed, and forgotten, while held.
        self.memfd_lock = threading.RLock()
        #: (transport.memfd) Received memfds remembered for sending on: address of the
        #: mapping -> (size, fd, the mapping).
        self.memfd_kept: Dict[int, Tuple[int, int, weakref.ref[mmap.mmap]]] = {}
        #: (transport.memfd) Sealed mappings made here: id(mapping) -> (fd, the mapping).
        self.memfd_sealed: Dict[int, Tuple[int, weakref.ref[mmap.mmap]]] = {}

        # -- transport.receipts --
        #: (transport.receipts) .key, .count: this thread's request tickets' key and count.
        self.tickets = threading.local()

        # -- connection._pipe --
        #: (connection._pipe) Held while an end's file-number watch is made: two threads
        #: asking at once share one.
        self.pipe_fileno_lock = threading.Lock()

        # -- _core._inspect --
        #: (_core._inspect) .on: this thread takes a viewer's snapshot, .since: its CPU time
        #: when it last paused, .rows: the rows of a long table it shows.
        self.status_viewer = threading.local()
        #: (_core._inspect) Guards `status_sources`.
        self.status_lock = threading.Lock()
        #: (_core._inspect) The ids of the status sources.
        self.status_source_ids = itertools.count(1)
        #: (_core._inspect) Id -> (kind, weak reference to the owner, its snapshot
        #: function of the owner).
        self.status_sources: Dict[int, Tuple[str, weakref.ref[Any], Callable[[Any], Any]]] = {}
        #: (_core._inspect) Name -> what viewers outside the program receive under it.
        self.status_fields: Dict[str, Callable[[], Any]] = {}

        # -- _core._runtime --
        #: (_core._runtime) Guards `hub` while it starts or shuts down.
        self.hub_lock = threading.Lock()
        #: (_core._runtime) This process's server, once started (None before, and in a
        #: forked child).
        self.hub: Optional[Server] = None
        #: (_core._runtime) Called once the main process's hub has started.
        self.main_hub_hooks: List[Callable[[], None]] = []
        #: (_core._runtime) Called at this process's clean end (``on_process_end``).
        self.end_hooks: List[Callable[[], None]] = []

        # -- _core._served --
        #: (_core._served) .sink: the release callbacks of the objects this thread
        #: pickles into a job's payload (``collecting_handoffs``).
        self.handoffs = threading.local()

        # -- _core._shared --
        #: (_core._shared) Guards `shared_cache`.
        self.shared_cache_lock = threading.Lock()
        #: (_core._shared) Key -> the frames this process built its shared object from;
        #: mappings held weakly (one lives while an object built on it does).
        self.shared_cache: Dict[bytes, List[Any]] = {}
