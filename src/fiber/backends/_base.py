"""The small interface every backend implements: it turns `JobSpec` objects into jobs on one
cluster manager, tells their state, and ends them, and knows nothing of processes, queues
or pools. The design: docs/contributing/backend-design.md, "The interface"."""

from __future__ import annotations

import abc
import dataclasses
import enum
import threading
import time
import traceback
from typing import (
    Callable,
    ClassVar,
    Dict,
    FrozenSet,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from .._backoff import polling
from .._process_state import here

__all__ = [
    "Resources",
    "JobSpec",
    "JobHandle",
    "JobOutput",
    "JobState",
    "JobStatus",
    "JobInfo",
    "Backend",
    "JobWatcher",
]


@dataclasses.dataclass(frozen=True)
class Resources:
    """What one job asks the cluster for. ``None`` means "the backend's default"."""

    cpu: Optional[float] = None
    memory_mb: Optional[int] = None
    gpu: Optional[int] = None
    #: Whether fiber chose ``cpu``, not the program: one a worker of a pool's job of
    #: several whose workers set none (`times`). A backend that cannot enforce CPUs has
    #: nothing to warn the program about then. Not compared.
    cpu_implied: bool = dataclasses.field(default=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("cpu", "memory_mb", "gpu"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"{name} must be a number, got {value!r}")
            if value < 0 or (name == "cpu" and value == 0):
                raise ValueError(f"{name} must be positive, got {value!r}")
            if name != "cpu" and not float(value).is_integer():
                raise ValueError(f"{name} must be a whole number, got {value!r}")

    def times(self, count: int) -> Resources:
        """What a job of ``count`` such workers asks for (a pool's job of several,
        ``Pool(workers_per_job=count)``): ``count`` times the CPUs (one a worker unless
        set), the memory and the GPUs set (left to the backend if not)."""
        return Resources(
            cpu=(self.cpu if self.cpu is not None else 1) * count,
            memory_mb=self.memory_mb * count if self.memory_mb is not None else None,
            gpu=self.gpu * count if self.gpu is not None else None,
            cpu_implied=self.cpu is None or self.cpu_implied,
        )

    def merged_over(self, default: Resources) -> Resources:
        """These resources, with ``default`` filling every field left as None."""
        return Resources(
            cpu_implied=self.cpu_implied if self.cpu is not None else default.cpu_implied,
            cpu=self.cpu if self.cpu is not None else default.cpu,
            memory_mb=self.memory_mb if self.memory_mb is not None else default.memory_mb,
            gpu=self.gpu if self.gpu is not None else default.gpu,
        )


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """One job to run: a command line with its environment and resources."""

    command: Tuple[str, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    resources: Resources = Resources()
    image: str = ""
    name: str = "fiber-job"
    #: Descriptors of this process the job is handed at its start, by the name of the
    #: environment variable that gives the job each one's number there. Only for a
    #: backend whose ``passes_fds`` is True; the caller closes its own copies after
    #: ``submit``.
    inherit: Mapping[str, int] = dataclasses.field(default_factory=dict)
    #: The caller reads the job's stdout and stderr itself: the backend gives the job a
    #: pipe for each and hands their read ends back as ``JobHandle.output``, so that what
    #: the job wrote outlives it, however it ended. Only for a backend whose
    #: ``passes_fds`` is True.
    capture_output: bool = False
    #: Hosts not to place the job on, where the backend places jobs itself or can ask its
    #: scheduler to (a pool's suspected hosts: cut off or silent, see the pool page's
    #: late tasks). Best effort: with no other host to take it, the job may still go to
    #: one of them.
    avoid_hosts: FrozenSet[str] = frozenset()


@dataclasses.dataclass(frozen=True)
class JobOutput:
    """The read ends of a job's stdout and stderr pipes (``JobSpec.capture_output``), now
    the caller's to read and close, and the job's log file (``fiber logs``), made empty
    at submit, for the caller to append what it reads (None: the job keeps no log)."""

    stdout_fd: int
    stderr_fd: int
    log_path: Optional[str] = None


class JobState(enum.Enum):
    """Where a job is in its life, in the backend's words mapped to fiber's.

    ``PENDING`` (queued or starting) and ``RUNNING`` are live; the others are final:
    ``SUCCEEDED`` (exit code 0), ``FAILED``, ``CANCELLED`` (by fiber or by a person) and
    ``LOST`` (the cluster no longer knows the job, or its node failed).
    """
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"  # the cluster no longer knows the job, or its node failed

    @property
    def finished(self) -> bool:
        """Whether the state is final (not ``PENDING`` or ``RUNNING``): the job is over."""
        return self not in (JobState.PENDING, JobState.RUNNING)


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """A job's state as its backend sees it.

    ``exitcode`` follows ``multiprocessing``: a negative number is the signal that killed
    the job; ``None`` while it runs or when the backend cannot tell.
    """

    state: JobState
    exitcode: Optional[int] = None
    reason: str = ""


@dataclasses.dataclass
class JobHandle:
    """A submitted job. ``pid`` is the OS pid where the backend knows it (local)."""

    job_id: str
    backend: str
    host: str = ""
    pid: Optional[int] = None
    #: The job's output, for a spec with ``capture_output`` (see `JobOutput`).
    output: Optional[JobOutput] = dataclasses.field(default=None, compare=False, repr=False)


@dataclasses.dataclass(frozen=True)
class JobInfo:
    """A fiber job as the cluster lists it, whichever program started it (``fiber ps``)."""

    job_id: str
    program: str
    name: str
    state: str  # the cluster's word for it ("running", "exited (1)", "Pending", ...)
    created: str = ""  # ISO 8601, UTC
    image: str = ""
    #: The job is over (exited, failed, cancelled): ``fiber ps`` lists it with ``--all``.
    ended: bool = False


class Backend(abc.ABC):
    """Create, watch and end jobs on one cluster manager."""

    #: The name under which the backend is registered (``FIBER_BACKEND=<name>``).
    name: ClassVar[str] = ""

    #: True when every job is a process of this machine that sees its filesystem and its
    #: process ids (``local``, ``netns``): what ``multiprocessing``'s own pipes, queues and
    #: semaphores need to reach a job (their file descriptors are handed over a Unix
    #: socket, their semaphores are opened by name). False for jobs on other hosts or in
    #: containers; the default, as a backend cannot know it of its cluster.
    jobs_share_host: ClassVar[bool] = False

    #: True when every job reaches this process over this host's own network (loopback,
    #: a Unix socket: ``local``): with ``tls = "auto"`` their connections stay plain, and
    #: the program makes no TLS credentials for them. False: jobs on other hosts (or in
    #: network namespaces of their own, as ``netns``'s), the default.
    jobs_share_network: ClassVar[bool] = False

    #: True when the backend can hand its jobs descriptors of this process at their start
    #: (``JobSpec.inherit``): jobs that are this process's own children (``local``).
    passes_fds: ClassVar[bool] = False

    #: Descriptors a started job costs this process (counted before jobs start): its
    #: anchor connection and the two ends of its sentinel pipe; more for a backend whose
    #: jobs are this process's children (pidfds, output pipes, anchors handed over).
    files_per_job: ClassVar[int] = 3

    #: True when the backend learns of a job's end the moment it happens (``local``: a
    #: pidfd or the fork server's report per job): a job's state is asked of it at once,
    #: and the job's own exit report is not taken in its place. False where status comes
    #: from polling the cluster (seconds late).
    sees_exits_at_once: ClassVar[bool] = False

    #: The backend's own configuration keys: a frozen dataclass whose fields (with ``#:``
    #: comments saying what each means) are the keys ``<name>_<field>``, read from
    #: ``fiber.init``, ``FIBER_<NAME>_<FIELD>`` and ``[fiber.<name>]`` of ``.fiberconfig``
    #: and checked with the core's; the backend reads them with ``fiber.config.settings``.
    #: None: it has none (a subclass declares its own, or reads its base's by its name).
    settings: ClassVar[Optional[type]] = None

    # (the relay: fiber.process._relay)
    #: True when every job is a child process of this one (``local``, ``netns``): its
    #: stdout and stderr can be pipes that this process reads (``JobSpec.capture_output``),
    #: so that what a job wrote outlives it. Elsewhere a job's first process stays as its
    #: output relay.
    jobs_are_children: ClassVar[bool] = False

    @abc.abstractmethod
    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Start one job per spec, in as few cluster calls as the manager allows.

        Raises:
            SubmitError: the cluster manager refused or could not be reached.
        """

    @abc.abstractmethod
    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        """The state of every given job (keyed by ``job_id``), from one query."""

    @abc.abstractmethod
    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        """Ask jobs to end: SIGTERM-like by default, SIGKILL-like with ``force``."""

    @abc.abstractmethod
    def listen_host(self) -> str:
        """The address of this process at which jobs of this backend can reach it."""

    def wait(self, handle: JobHandle, timeout: Optional[float] = None) -> Optional[JobStatus]:
        """Block until the job finished (its status) or ``timeout`` passed (``None``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = polling()
        while True:
            st = self.status([handle])[handle.job_id]
            if st.state.finished:
                return st
            if deadline is not None and time.monotonic() >= deadline:
                return None
            delay = backoff.next()
            time.sleep(delay if deadline is None else min(delay, deadline - time.monotonic()))

    def watcher(self) -> JobWatcher:
        """The one watcher of this backend's jobs (created on first use)."""
        with here.jobs.watcher_lock:
            w = self.__dict__.get("_watcher")
            if w is None:
                w = self.__dict__["_watcher"] = JobWatcher(self)
            return w

    def prepare(self) -> None:
        """Get ready to submit soon, so that the first submit is as fast as the next ones
        (the local backend starts its fork server, about 0.5 s): for a process that will
        start jobs at its users' requests (a manager of objects in jobs). Nothing by
        default; a failure is left for the submit to report."""
        return None

    def job_time_limit(self) -> Optional[float]:
        """Seconds each job may run before its cluster ends it: the time limit fiber asks
        for (Slurm's ``--time``), so that a pool renews its workers before it; None: no
        limit known (the default)."""
        return None

    def node_cpus(self) -> Optional[int]:
        """The CPUs of the smallest node this backend's jobs may go to, if it can tell:
        a pool that does not say how many workers a job holds puts as many in one as fit
        it (see the pool page). None: unknown, or one machine (the default), or the
        cluster cannot be asked now. Asked once a pool of 64 workers or more."""
        return None

    def release(self, handle: JobHandle) -> None:
        """Drop what the backend keeps of a finished job whose process object is gone (a
        long-running program starts jobs without end: a pool with ``maxtasksperchild``)."""
        return None

    def close(self) -> None:
        """Release clients and threads; jobs already submitted are not touched."""
        w = self.__dict__.pop("_watcher", None)
        if w is not None:
            w.stop()


ExitCallback = Callable[[JobHandle, JobStatus], None]


class JobWatcher:
    """One thread that polls the status of *all* watched jobs with one ``status`` call.

    The poll interval starts at ``min_interval`` and backs off to ``max_interval`` while
    nothing changes; a new job or a state change resets it. Callbacks run on the watcher
    thread and must be quick.
    """

    def __init__(self, backend: Backend, min_interval: float = 0.05,
                 max_interval: float = 2.0) -> None:
        self._backend = backend
        self._min = min_interval
        self._max = max_interval
        self._jobs: Dict[str, Tuple[JobHandle, ExitCallback]] = {}
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stopped = False
        self._reset = False

    def start(self) -> None:
        """Start the watcher's thread, if it has not started yet.

        Called before jobs are submitted: a job that is submitted while the interpreter
        exits (an executor's pending work at exit, a pool replacing a worker) must find
        the thread running, since Python 3.12 and later start no new thread then; and a
        thread that cannot start fails the start before any job exists.
        """
        with self._cond:
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None:
            thread = threading.Thread(
                target=self._run, name=f"fiber-watch-{self._backend.name}", daemon=True)
            thread.start()
            self._thread = thread

    def watch(self, handle: JobHandle, on_exit: ExitCallback) -> None:
        """Call ``on_exit(handle, status)`` once, when the job has finished."""
        with self._cond:
            self._jobs[handle.job_id] = (handle, on_exit)
            self._reset = True
            self._start_locked()
            self._cond.notify()

    def unwatch(self, handle: JobHandle) -> None:
        """Stop watching ``handle``'s job: its ``on_exit`` will not be called (no error if it was
        not watched, or has been delivered already).
        """
        with self._cond:
            self._jobs.pop(handle.job_id, None)

    def wake(self) -> None:
        """Poll now, from the shortest interval again: a job's end was reported."""
        with self._cond:
            self._reset = True
            self._cond.notify()

    def stop(self) -> None:
        """End the watcher thread (after its current poll; waits up to 5 s for it).

        Called by ``Backend.close``; jobs still watched get no callback.
        """
        with self._cond:
            self._stopped = True
            self._cond.notify()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)

    def _deliver(self, jobs: List[Tuple[JobHandle, ExitCallback]]) -> int:
        """Query ``jobs`` once; call back (and stop watching) those that finished."""
        try:
            statuses = self._backend.status([h for h, _ in jobs])
        except Exception:  # a flaky cluster command: try again later, slower
            return 0
        done = 0
        for handle, on_exit in jobs:
            st = statuses.get(handle.job_id)
            if st is not None and st.state.finished:
                with self._cond:
                    self._jobs.pop(handle.job_id, None)
                self._call_back(on_exit, handle, st)
                done += 1
        return done

    @staticmethod
    def _call_back(on_exit: ExitCallback, handle: JobHandle, status: JobStatus) -> None:
        """Tell ``on_exit`` that ``handle`` ended: an error of one job's callback is
        printed, and the watch of every other job goes on."""
        try:
            on_exit(handle, status)
        except Exception:
            traceback.print_exc()

    def _run(self) -> None:
        backoff = polling(self._min, self._max)
        while True:
            with self._cond:
                while not self._jobs and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                jobs = list(self._jobs.values())
            done = self._deliver(jobs)
            del jobs  # a delivered job's callback holds its process: not while we wait
            if done:
                backoff.reset()
            interval = backoff.next()
            with self._cond:
                if not self._stopped and not self._reset:
                    self._cond.wait(interval)
                if self._reset:
                    self._reset = False
                    backoff.reset()
