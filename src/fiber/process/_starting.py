"""Starting processes: many at once with one ``submit`` per backend (a job array on
Slurm), their jobs withdrawn if anything fails after it; and what a process class's backend
says before its jobs start (its nodes' CPUs, the descriptors a job costs)."""

from __future__ import annotations

from typing import ClassVar, Dict, List, Optional, Protocol, Sequence, Tuple, Type

from .._log import open_log
from ..backends import Backend, JobHandle, JobSpec, get_backend
from ..config import get_config
from . import _launcher
from ._job import Job
from ._limits import FILES_PER_JOB, ensure_open_files


class Startable(Protocol):
    """What starting needs of a `fiber.process._process.Process` (named here, not
    imported: that module starts its processes with this one)."""

    #: The backend of its class's context (None: the configured one).
    _backend_name: ClassVar[Optional[str]]

    def _prepare(self) -> Tuple[Job, JobSpec]:
        """Called by `start_all` before its job is submitted: its launch record (served
        to the job by its parent's hub) and the job's spec."""

    def _launched(self, job: Job, handle: JobHandle) -> None:
        """Called once its job was submitted: the process is started, its job is
        ``handle``."""

__all__ = ["backend_of", "node_cpus", "files_per_job", "start_all"]


def backend_of(cls: Type[Startable]) -> Backend:
    """The backend whose jobs run processes of ``cls`` (a context's, else the config's)."""
    return get_backend(cls._backend_name or get_config().backend)  # noqa: SLF001


def node_cpus(cls: Type[Startable]) -> Optional[int]:
    """The CPUs of the smallest node of the backend of ``cls`` (``Backend.node_cpus``);
    None if unknown, or if its backend cannot be had now (its error is raised when the
    job starts, where it says more)."""
    try:
        backend = backend_of(cls)
    except Exception:
        return None
    return backend.node_cpus()


def files_per_job(cls: Type[Startable]) -> int:
    """The descriptors a job of ``cls`` costs this process (``Backend.files_per_job``);
    the most any backend's costs if its backend cannot be had now (its error is raised
    when the job starts, where it says more)."""
    try:
        return backend_of(cls).files_per_job
    except Exception:
        return FILES_PER_JOB


def start_all(processes: Sequence[Startable]) -> None:
    """Start many processes with one ``submit`` per backend (a job array on Slurm).

    Whatever fails after a submit ends that submit's jobs not made their processes' yet
    (``Job.withdraw``): the caller gets the error, and no job it was not given is left
    running for the exit handler to wait for.

    Raises:
        pickle.PicklingError, TypeError: a target or argument cannot be pickled (nothing
            is submitted).
        BackendError: the backend refused; none of that backend's jobs started.
        ResourceLimitError: the jobs would exceed this process's open-file limit
            (raised to its hard limit first); none started.
        ConfigError: ``log_file`` cannot be written (its directory cannot be made);
            none started.
    """
    ensure_open_files(len(processes),  # (a pool's workers are of one class: asked once)
                      per_job=max((files_per_job(cls) for cls in {type(p) for p in processes}),
                                  default=0))
    open_log()  # a log file that cannot be written fails here, before any submit
    prepared: List[Tuple[Startable, Job, JobSpec]] = []
    try:
        for proc in processes:
            job, spec = proc._prepare()  # noqa: SLF001 - this module's class
            prepared.append((proc, job, spec))
    except BaseException:
        for _, job, _ in prepared:
            job.abandon()
        raise
    by_backend: Dict[int, List[Tuple[Startable, Job, JobSpec]]] = {}
    for item in prepared:
        by_backend.setdefault(id(item[1].backend), []).append(item)
    groups = list(by_backend.values())
    for i, group in enumerate(groups):
        backend, ended_here = group[0][1].backend, False
        try:
            backend.watcher().start()  # now: a thread may not start once the job runs
            ended_here = True  # from here on, a failure ends the group's jobs itself
            _launch(group, _submit(backend, group))
        except BaseException:
            for later in groups[i + 1 if ended_here else i:]:
                for _, job, _ in later:
                    job.abandon()
            raise


#: Jobs a backend that hands its jobs their anchors (`Backend.passes_fds`) is given at a
#: time: this process's copies of their ends close after each such submit.
_HANDED_AT_ONCE = 64


def _submit(backend: Backend, group: List[Tuple[Startable, Job, JobSpec]]) -> List[JobHandle]:
    """Submit ``group``'s jobs to ``backend``: with one ``submit`` (one job array on
    Slurm), or, where jobs are handed their anchors, `_HANDED_AT_ONCE` at a time. A
    job's anchor ends at the hub only once this process has closed its copy of the
    job's end: submitted all at once, a worker of a big pool that dies while the pool
    still starts the others is not seen lost until they have all started.

    Raises:
        what ``submit`` raises, once the jobs submitted before are withdrawn (none of
        the group's jobs runs then).
    """
    at_once = _HANDED_AT_ONCE if backend.passes_fds else len(group)
    handles: List[JobHandle] = []
    try:
        for at in range(0, len(group), at_once):
            part = [spec for _, _, spec in group[at:at + at_once]]
            with _launcher.handing_anchors(backend, part) as specs:
                handles.extend(backend.submit(specs))
    except BaseException as e:
        for (_, job, _), handle in zip(group, handles):
            job.withdraw(handle, e)
        for _, job, _ in group[len(handles):]:
            job.abandon()
        raise
    return handles


def _launch(group: List[Tuple[Startable, Job, JobSpec]], handles: List[JobHandle]) -> None:
    """Make each submitted job its process's. If that fails for one, it and those after
    it are withdrawn (ended at once: nothing waits for a job whose start raised) and the
    error is raised."""
    for n, ((proc, job, _), handle) in enumerate(zip(group, handles)):
        try:
            proc._launched(job, handle)  # noqa: SLF001 - this module's class
        except BaseException as e:
            for (_, unlaunched, _), later in list(zip(group, handles))[n:]:
                unlaunched.withdraw(later, e)
            raise
