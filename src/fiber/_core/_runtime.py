"""Per-process runtime state: this process's server (the *hub*) and where it listens. The
hub, its lock and the hooks of this module are kept in ``here.transport``
(`fiber._state.transport`).

Every fiber process has at most one hub, started on first use: the authenticated server
(`Server`) on which this process serves what it created —
its children's launch payloads, its queues and pipes, its locks. Nothing starts at import.

The hub listens on, in order: ``config.listen_host``; in a child, the local address on the
route to its parent (the address the parent's network can reach); in the main process, the
address the backend says its jobs can reach.
"""

from __future__ import annotations

import atexit
import os
import socket
import threading
from typing import Callable, Optional

from .. import _log, _machine
from .._process_state import here
from ..backends import get_backend
from ..config import get_config
from ..transport import auth, credentials
from ..transport.local import register_local_server, unregister_local_server
from ..transport.server import Server
from ..transport.sockets import split_address
from . import _inspect

__all__ = ["hub", "listen_host", "parent_address", "shutdown_hub", "on_process_end",
           "run_end_hooks"]

PARENT_ENV = "FIBER_PARENT"
JOB_ENV = "FIBER_JOB"
#: A job handed its anchor at its start (see fiber.process._launcher.handing_anchors):
#: the anchor's descriptor, and the process id its parent's hub knows it by.
ANCHOR_FD_ENV = "FIBER_ANCHOR_FD"
PROCESS_ID_ENV = "FIBER_PROCESS_ID"
#: How a job's output reaches its parent (see fiber.process._output): "captured" (its
#: parent drains its pipes) or "relay" (its first process stays as its relay); unset:
#: not forwarded (``forward_output`` off).
OUTPUT_ENV = "FIBER_OUTPUT"
OUTPUT_CAPTURED = "captured"
OUTPUT_RELAYED = "relay"


@here.after_fork_in_child
def _forget_hub() -> None:
    """A forked child has no hub (the parent's thread did not follow it), and a lock
    another thread held at the fork stays held: it starts its own on first use."""
    state = here.transport
    state.hub, state.hub_lock = None, threading.Lock()


def parent_address() -> str:
    """The hub address of this process's parent, or '' in the main process."""
    return os.environ.get(PARENT_ENV, "")


def _host_of(address: str) -> str:
    return split_address(address)[0]


def _route_to(host: str) -> str:
    """The local address the kernel would use to reach ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((host, 9))
            return str(s.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def listen_host() -> str:
    """The address this process's listening sockets bind to."""
    cfg = get_config()
    if cfg.listen_host:
        return cfg.listen_host
    parent = parent_address()
    if parent and not parent.startswith("inproc://"):
        return _route_to(_host_of(parent))
    return get_backend(cfg.backend).listen_host()


def hub() -> Server:
    """This process's server, started on first use."""
    state = here.transport
    started_main = False
    with state.hub_lock:
        server = state.hub
        if server is None or not server.alive:
            cfg = get_config()
            if cfg.log_file and not parent_address():
                # The main process's log file opened here, in the caller's thread, before
                # any thread of fiber's logs: a file that cannot be opened fails the
                # program's first Pool(), Queue() or start(), not a thread's line.
                _log.open_log()
            # Made before any address is handed out: a child forked by multiprocessing
            # then inherits it, and can authenticate to this hub.
            auth.program_secret()
            # the same: made now when TLS may be needed, or taken
            credentials.prepare(cfg, not get_backend(cfg.backend).jobs_share_network)
            # listen_port is the main process's: its jobs' hubs take free ports
            port = 0 if parent_address() else cfg.listen_port
            server = state.hub = Server(listen_host(), cfg.heartbeat_interval,
                                        cfg.heartbeat_timeout, name="fiber-hub", port=port)
            server.say = _log.info
            register_local_server(server)
            server.register(_inspect.SERVICE, _inspect.StatusService())
            if not parent_address():  # the main process: fiber top finds it there
                _machine.register_program(server.address, auth.program_secret(), cfg.backend)
                started_main = True
        started = server
    if started_main:  # outside the lock: a hook may use the hub
        for hook in state.main_hub_hooks:
            hook()
    return started


def on_main_hub(hook: Callable[[], None]) -> None:
    """Call ``hook()`` when the program's main process starts its hub (the dashboard,
    from a layer above, starts with it); what it raises, the hub's first user gets."""
    here.transport.main_hub_hooks.append(hook)


def starting_hub() -> bool:
    """Whether a thread is in `hub` (holding its lock): code that garbage collection may
    run there (a finalizer) must not call `hub` itself, in this thread."""
    return here.transport.hub_lock.locked()


def hub_if_started() -> Optional[Server]:
    return here.transport.hub


def shutdown_hub() -> None:
    state = here.transport
    with state.hub_lock:
        h, state.hub = state.hub, None
    if h is not None:
        unregister_local_server(h)
        h.close()


def on_process_end(hook: Callable[[], None]) -> None:
    """Call ``hook`` at this process's clean end, while its connections are still open:
    a job's once its ``run()``, its other threads and its ``atexit`` handlers are done
    (fiber.process calls `run_end_hooks` and the handlers: a job ends with
    ``os._exit``), the main program's at exit. For what must reach a hub before the
    connection closes (a queue's lease settles what it took)."""
    end_hooks = here.transport.end_hooks
    if not end_hooks:
        atexit.register(run_end_hooks)
    end_hooks.append(hook)


def run_end_hooks() -> None:
    """Run the `on_process_end` hooks (each once: a hook may be called again, from the
    main program's ``atexit`` too, and must then do nothing)."""
    for hook in list(here.transport.end_hooks):
        try:
            hook()
        except Exception:  # noqa: S110 - one failing must not keep the others from running
            pass
