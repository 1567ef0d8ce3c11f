"""The per-process state of one layer: the processes' (`fiber.process`) and the backends'
(`fiber.backends`). Its one instance is ``here.jobs``
(`fiber._process_state`)."""

from __future__ import annotations

import array
import collections
import itertools
import threading
import weakref
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, Optional, Set, Tuple

if TYPE_CHECKING:
    from ..backends._base import Backend, JobHandle
    from ..backends.local._forkserver import ForkServer
    from ..process._process import Process
    from ..process._relay import RelayLink

__all__ = ["JobsState"]


class JobsState:
    """What this process keeps for that layer; each attribute says whose it is."""

    def __init__(self) -> None:
        # -- fiber.process ---------------------------------------------------------------
        #: (process._bootstrap) Set when this job's main has reported its exit: its
        #: lifeline thread stops watching.
        self.bootstrap_exiting = threading.Event()

        #: (process._bound) Held while a bound ``Process`` class is looked up or made (the
        #: classes themselves are that module's globals, by which they pickle).
        self.bound_class_lock = threading.Lock()

        #: (process._cluster_view) Held while the backends are asked for the live jobs.
        self.cluster_view_lock = threading.Lock()
        #: (process._cluster_view) When the live jobs were last counted (monotonic) and
        #: what was found: -MIN_INTERVAL_S at first, so that the first look asks.
        self.cluster_view_last: Tuple[float, Dict[str, object]] = (-5.0, {})
        #: (process._cluster_view) Held while a thread of ``latest`` asks the backends.
        self.cluster_view_refreshing = threading.Lock()

        #: (process._inspected) What tells this process's host apart (boot id, pid and net
        #: namespaces), read at first use; None until then.
        self.host_identity: Optional[bytes] = None

        #: (process._job) Jobs whose Process objects were collected (a finalizer only
        #: appends, lock-free): the next start releases them.
        self.collected_jobs: Deque[Tuple[Backend, JobHandle]] = collections.deque()
        #: (process._job) Processes whose ends their owner tells in its own words (a
        #: pool's workers): ``say_end`` says nothing of them.
        self.ends_said_elsewhere: weakref.WeakSet[Any] = weakref.WeakSet()

        #: (process._limits) Whether the soft open-file limit was raised (once a process).
        self.open_files_raised = False
        #: (process._limits) Held while the open-file limit is read and raised.
        self.open_files_lock = threading.Lock()

        #: (process._lineage) The hub address of the program's main process, in a job
        #: (from its payload); None: this process's own hub.
        self.master_address: Optional[str] = None
        #: (process._lineage) Processes that end with their parent (helper jobs).
        self.helper_processes: weakref.WeakSet[Any] = weakref.WeakSet()

        #: (process._method) This process's default start method (None: none set, the
        #: backend's name stands for it).
        self.default_method: Optional[str] = None
        #: (process._method) Whether ``set_start_method`` picked a backend or method in
        #: this process.
        self.method_chosen = False

        #: (process._output) Where this job's output goes (``captured``, ``relay``; "":
        #: not to its parent).
        self.output_mode = ""
        #: (process._output) This job's link to its output relay, if it has one.
        self.relay_link: Optional[RelayLink] = None
        #: (process._output) What FIONREAD fills for fd 1 (a C int: read as [0]).
        self.output_out_count: array.array[int] = array.array("i", [0])
        #: (process._output) What FIONREAD fills for fd 2 (a C int: read as [0]).
        self.output_err_count: array.array[int] = array.array("i", [0])

        #: (process._parent) The Process object of this job's parent (None in the main
        #: process).
        self.parent_process: Optional[Process] = None
        #: (process._parent) The standard library's own ``parent_process``, kept when it
        #: is first replaced.
        self.stdlib_parent_process: Optional[Callable[[], Any]] = None

        #: (process._process) The Process object of this process: set to its
        #: ``_MainProcess`` when that module is imported (a class of fiber's, which this
        #: module may not make), to the job's own in a job.
        self.current_process: Process
        #: (process._process) The started children not joined yet.
        self.children: Set[Process] = set()
        #: (process._process) Whether the exit function is registered (atexit).
        self.exit_registered = False
        #: (process._process) Set when the exit function begins (``program_exiting``).
        self.process_exiting = threading.Event()

        # -- fiber.backends --------------------------------------------------------------
        #: (backends) The one instance of each backend name, made on first use.
        self.backend_instances: Dict[str, Backend] = {}
        #: (backends) Held while a backend is registered or its instance made.
        self.backends_lock = threading.Lock()

        #: (backends._base) Held while a backend's one watcher is looked up or made.
        self.watcher_lock = threading.Lock()

        #: (backends.ssh._backend) The numbers of this process's ssh jobs' ids.
        self.ssh_job_numbers: itertools.count[int] = itertools.count(1)

        #: (backends.ssh._hosts) The numbers of the ssh probes' log files.
        self.ssh_probe_numbers: itertools.count[int] = itertools.count(1)

        #: (backends.ssh._jobs) Whether this program's ssh logs were checked (old ones
        #: pruned, an earlier process's with this pid removed).
        self.ssh_logs_checked = False

        #: (backends.ssh._session) The ssh keeper's source (``_keeper.py``), read once.
        self.ssh_keeper_source: Optional[bytes] = None

        #: (backends.local._backend) The numbers of this process's local jobs' ids (shared
        #: by every LocalBackend: a job id names one job of this process).
        self.local_job_numbers: itertools.count[int] = itertools.count(1)
        #: (backends.local._backend) The notes already written to stderr (each once).
        self.local_noted: Set[str] = set()

        #: (backends.local._forkserver) The fork servers this process started and has not
        #: closed.
        self.fork_servers_live: Set[ForkServer] = set()
        #: (backends.local._forkserver) This process's fork server, started on first use.
        self.fork_server: Optional[ForkServer] = None
        #: (backends.local._forkserver) Held while the fork server is started.
        self.fork_server_lock = threading.Lock()
        #: (backends.local._forkserver) Why the fork server could not start (this process
        #: then starts no other); None: it has not failed.
        self.fork_server_failed: Optional[str] = None
