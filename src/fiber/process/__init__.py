"""Job-backed processes with the semantics of ``multiprocessing.Process``.

A ``Process`` runs its target as a job of the configured backend (a subprocess, a Slurm
job, a container, a pod); ``current_process``, ``parent_process`` and ``active_children``
are multiprocessing's; ``start_all``, ``terminate_all`` and ``end_with_parent`` are fiber's.
"""

# Inside: _process: Process and this process's children; _attributes: its name, daemon
# flag, authkey, and the job's host, id and end; _describe: its repr; _job: the parent's
# record of one started job; _parent: the parent as a job sees it. _bound: Process classes
# bound to one backend (ctx.Process). _lineage: the program's main process, which every job
# ends with. _launcher: the launch protocol (the hub hands a child its payload and hears its
# exit code); _bootstrap: the entry point of every job (python -m fiber.process._bootstrap).
# _output, _captured, _relay, _printer: a job's output, forwarded to its parent. _title:
# process titles. _fd_handoff: objects of multiprocessing itself handed to a job of this
# host. _limits: the open-file limit that many jobs need.

from .._exports import publish
from . import _cluster_view  # noqa: F401 - fiber top and fiber dashboard PID get it
from ._lineage import end_with_parent
from ._parent import parent_process
from ._process import Process, active_children, current_process, terminate_all
from ._starting import start_all

__all__ = ["Process", "current_process", "parent_process", "active_children", "start_all",
           "terminate_all", "end_with_parent"]

publish(__name__, Process)
