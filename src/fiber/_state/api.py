"""The per-process state of one layer: the API layer's: the top-level modules, `config`,
`dashboard`, `queues`, `synchronize`, `managers`, `pool` and `ring`.
Its one instance is ``here.api`` (`fiber._process_state`)."""

from __future__ import annotations

import collections
import itertools
import logging
import queue
import threading
import weakref
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Optional, Set, Tuple

if TYPE_CHECKING:
    from ..config import Config
    from ..context import FiberContext
    from ..dashboard import Dashboard
    from ..managers._async_calls import AsyncChannel
    from ..managers._managers import _Server
    from ..queues._lending import Lease
    from ..ring._member import RingMember

__all__ = ["ApiState"]


class ApiState:
    """What this process keeps for that layer; each attribute says whose it is."""

    def __init__(self) -> None:
        # -- fiber._log ---------------------------------------------------------------
        #: (_log) The pid, process name and ``log_file`` fiber's logger was set up for, and
        #: whether that file is written (False: it could not be opened, lines go to stderr).
        self.log_configured: Tuple[int, str, str, bool] = (0, "", "", True)
        #: (_log) The name this process's log lines carry (a job's ``Process.name``).
        self.log_process_name = "MainProcess"
        #: (_log) The level fiber last gave its logger from the config (None: not yet).
        self.log_applied: Optional[int] = None
        #: (_log) Held to set the logger up (made anew in a forked child).
        self.log_lock = threading.Lock()
        #: (_log) The handler _log added, in this process or the one forked from.
        self.log_handlers: List[logging.Handler] = []
        #: (_log) The last warnings of this process (when, the text), for the dashboard
        #: and fiber top.
        self.log_recent_warnings: Deque[Tuple[float, str]] = collections.deque(maxlen=100)
        #: (_log) How many warnings this process logged in all.
        self.log_warning_count = 0

        # -- fiber._machine -----------------------------------------------------------
        #: (_machine) The path of this main process's program file, once written.
        self.machine_program_file: Optional[str] = None
        #: (_machine) Whether an earlier process's job logs under this pid were removed.
        self.machine_logs_checked = False

        # -- fiber.context ------------------------------------------------------------
        #: (context) The context of each backend or start method (None: the default
        #: backend's), made once.
        self.contexts: Dict[Optional[str], FiberContext] = {}
        #: (context) Held to make a context once.
        self.contexts_lock = threading.Lock()

        # -- fiber.errors -------------------------------------------------------------
        #: (errors) The classes ``as_remote_error`` made, by the type they extend (one per
        #: type, so that a pickled error comes back as the same class). Only grows.
        self.remote_classes: Dict[type, type] = {}
        #: (errors) The other way: the type each of those classes extends.
        self.remote_bases: Dict[type, type] = {}

        # -- fiber.config -------------------------------------------------------------
        #: (config) Held to resolve, set or replace the config in force.
        self.config_lock = threading.Lock()
        #: (config) The keys ``fiber.init`` set (highest precedence), by key.
        self.config_explicit: Dict[str, Any] = {}
        #: (config) The config in force in this process (None: not resolved yet).
        self.config_resolved: Optional[Config] = None

        # -- fiber.config._compat -----------------------------------------------------
        #: (config._compat) The original fiber's no-effect keys a program set, and to what
        #: (read back as set).
        self.compat_no_effect_set: Dict[str, Any] = {}
        #: (config._compat) The keys already warned about in this process (``warn_once``).
        self.compat_warned: Set[str] = set()

        # -- fiber.config._registry ---------------------------------------------------
        #: (config._registry) The backend classes ``register`` added in this process, by
        #: name (besides the entry points).
        self.registered_backends: Dict[str, Any] = {}
        #: (config._registry) Guards ``registered_backends``.
        self.registry_lock = threading.Lock()

        # -- fiber.queues._lending ----------------------------------------------------
        #: (queues._lending) The leases of this process, for a forked child to let go of
        #: its copies, and for this process's end to settle.
        self.live_leases: weakref.WeakSet[Lease] = weakref.WeakSet()

        # -- fiber.queues._queue ------------------------------------------------------
        #: (queues._queue) Makes each queue's ``_reader`` once.
        self.queue_reader_lock = threading.Lock()
        #: (queues._queue) Makes each handle's lease once (made anew in a forked child).
        self.queue_lease_lock = threading.Lock()

        # -- fiber.ring._member -------------------------------------------------------
        #: (ring._member) The ring as this member sees it, once its rendezvous is done.
        self.ring_member: Optional[RingMember] = None
        #: (ring._member) The torch store of rank 0: it serves until the member ends.
        self.ring_stores: List[Any] = []

        # -- fiber.managers._async_calls ----------------------------------------------
        #: (managers._async_calls) This process's channel to each manager address.
        self.manager_channels: Dict[str, AsyncChannel] = {}
        #: (managers._async_calls) Guards ``manager_channels`` (made anew in a forked
        #: child, with no channel).
        self.manager_channels_lock = threading.Lock()

        # -- fiber.managers._managers -------------------------------------------------
        #: (managers._managers) The started managers' servers not stopped yet, for the
        #: exit hook to stop.
        self.manager_servers: Set[_Server] = set()
        #: (managers._managers) Guards ``manager_servers``.
        self.manager_servers_lock = threading.Lock()
        #: (managers._managers) The servers of collected managers, for the stopper thread.
        self.manager_stop_queue: queue.SimpleQueue[_Server] = queue.SimpleQueue()
        #: (managers._managers) The thread that stops them (None: not started yet).
        self.manager_stopper: Optional[threading.Thread] = None
        #: (managers._managers) Whether the exit hook that stops the servers is registered.
        self.manager_exit_hook = False

        # -- fiber.managers._proxies --------------------------------------------------
        #: (managers._proxies) The garbage-collected proxies' objects to detach
        #: (address, name, pending), for the detach thread.
        self.proxy_detach_queue: queue.SimpleQueue[List[Any]] = queue.SimpleQueue()
        #: (managers._proxies) The thread that sends those detaches (None: not started).
        self.proxy_detach_thread: Optional[threading.Thread] = None
        #: (managers._proxies) Held to start that thread once.
        self.proxy_detach_lock = threading.Lock()
        #: (managers._proxies) The classes ``MakeProxyType`` made, by (name, exposed, base).
        self.proxy_types: Dict[Tuple[str, Tuple[str, ...], type], type] = {}

        # -- fiber.managers._server ---------------------------------------------------
        #: (managers._server) Per thread: ``on`` while the hub thread pickles a result
        #: (``pickling_on_hub``).
        self.server_pickling = threading.local()
        #: (managers._server) The managed objects to let go of on the releaser thread.
        self.server_released: queue.SimpleQueue[Any] = queue.SimpleQueue()
        #: (managers._server) The releaser thread, once started.
        self.server_releaser: Optional[threading.Thread] = None
        #: (managers._server) Held to start the releaser thread once.
        self.server_releaser_lock = threading.Lock()

        # -- fiber.pool._pool ---------------------------------------------------------
        #: (pool._pool) Numbers the pools of this process (their names in fiber top and
        #: the dashboard).
        self.pool_numbers = itertools.count(1)

        # -- fiber.synchronize._primitives --------------------------------------------
        #: (synchronize._primitives) Which threads of this process hold which locks:
        #: {lock name: {thread ident: count}}, for ``_is_mine``.
        self.locks_held: Dict[bytes, Dict[int, int]] = {}
        #: (synchronize._primitives) Guards ``locks_held``.
        self.locks_held_lock = threading.Lock()

        # -- fiber.dashboard ----------------------------------------------------------
        #: (dashboard) This program's own dashboard, once served (one a process).
        self.dashboard_served: Optional[Dashboard] = None
