"""Job-backed processes with the semantics of ``multiprocessing.Process``.

A `Process` is a job on the configured backend (a subprocess with ``local``, a
Slurm job, a pod, a container). ``start`` submits it (see `fiber.process._launcher` for the
launch protocol), ``join``/``is_alive``/``exitcode`` follow the backend's view of the job,
``terminate``/``kill`` ask the backend to end it. ``sentinel`` is a real file descriptor
that becomes readable when the job has ended, so it works with
``multiprocessing.connection.wait`` and ``select``.

``pid`` is the OS pid where the backend knows it (``local``); elsewhere it is a number
unique within the program, above the largest Linux pid, so it can never name a local
process by mistake.
"""

from __future__ import annotations

import atexit
import itertools
import os
import secrets
import sys
import threading
import time
import weakref
from typing import (
    Any,
    Callable,
    ClassVar,
    Dict,
    FrozenSet,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
)

from .._core import _inspect, _runtime
from .._core._served import collecting_handoffs, probing
from .._log import log, name_process, program_level
from .._process_state import here
from ..backends import JobHandle, JobSpec, JobState, JobStatus, Resources
from ..config import get_config
from ..errors import ProcessStateError
from ..meta import resources_of
from ..transport.remote import format_user_exception
from ..transport.serialization import dumps
from ..transport.unpicklable import PICKLING_ERRORS, explain, explained
from . import _describe, _fd_handoff, _launcher
from ._attributes import ProcessAttributes
from ._describe import exit_code_of
from ._job import Job, collect, release_collected, say_end, say_lost_contact
from ._lineage import lifeline_address, master_address
from ._method import default_method
from ._starting import backend_of, start_all

__all__ = ["Process", "current_process", "active_children", "terminate_all",
           "kill_children", "set_resources", "set_placement", "mark_tagged_output",
           "mark_daemonic", "run_in_job", "program_exiting", "live_jobs"]

_SYNTHETIC_PID_BASE = 1 << 22  # Linux pids never exceed this
#: Seconds ``join`` waits for the last output of a job that has ended (see _printer).
_OUTPUT_WAIT_S = 2.0


class Process(ProcessAttributes):
    """A job-backed process; the API of ``multiprocessing.Process`` (``start`` says what
    it raises)."""

    #: The backend this class starts jobs on; None means the configured default.
    _backend_name: ClassVar[Optional[str]] = None
    #: The start method its jobs say they were started with (None: the parent's).
    _start_method: ClassVar[Optional[str]] = None
    _identity: Tuple[int, ...]
    _counter: itertools.count[int]

    def __init__(self, group: None = None, target: Optional[Callable[..., object]] = None,
                 name: Optional[str] = None, args: Iterable[object] = (),
                 kwargs: Optional[Mapping[str, object]] = None, *,
                 daemon: Optional[bool] = None) -> None:
        if group is not None:
            raise ValueError("group argument must be None for now")
        current = here.jobs.current_process
        count = next(current._counter)  # noqa: SLF001 - this module's class
        self._identity = current._identity + (count,)  # noqa: SLF001
        self._config: Dict[str, Any] = dict(current._config)  # noqa: SLF001
        self._parent_pid = here.pid
        self._parent_name = current.name
        self._target = target
        self._args = tuple(args)
        self._kwargs = dict(kwargs or {})
        kind = type(self).__dict__.get("_named_as", type(self).__name__)
        self._name = name or f"{kind}-" + ":".join(map(str, self._identity))
        self._job: Optional[Job] = None
        self._closed = False
        self._counter = itertools.count(1)
        self._resources: Optional[Resources] = None
        self._avoid_hosts: FrozenSet[str] = frozenset()  # see set_placement
        self._tagged_output = False  # see mark_tagged_output
        if daemon is not None:
            self.daemon = daemon
            """Whether the process is daemonic: terminated when its parent exits, and unable
            to start children of its own. Set it before ``start`` (a
            ``ProcessStateError`` after); at exit a parent cancels its daemonic children's
            jobs and joins the others, as multiprocessing does."""

    # -- what runs in the child -----------------------------------------------------------

    def run(self) -> None:
        """The code of the process; calls ``target(*args, **kwargs)`` by default."""
        if self._target is not None:
            self._target(*self._args, **self._kwargs)

    # -- the parent's controls ------------------------------------------------------------

    def start(self) -> None:
        """Submit the job that runs this process.

        Raises:
            pickle.PicklingError, TypeError, AttributeError: target or arguments cannot be
                pickled (nothing is submitted).
            BackendError: the backend could not create the job.
            ProcessError: it holds objects of ``multiprocessing`` itself (a pipe, a queue)
                and the backend's jobs do not share this host.
            fiber.errors.ProcessStateError (an AssertionError): started before, by a
                process other than its creator, or in a daemonic one. ValueError: closed.
            ConfigError: ``log_file`` cannot be written (nothing is submitted).
        """
        start_all([self])

    def _explained(self, error: BaseException) -> BaseException:
        """A pickling error of this process, naming the target or argument that failed."""
        for path, part, what in (("target", self._target, "target"),
                                 ("args", self._args, "arguments"),
                                 ("kwargs", self._kwargs, "keyword arguments")):
            if explain(part, path) is not None:
                return explained(error, f"{self.name}'s {what}", part, path)
        return explained(error, f"{self.name}", self, "process")

    def _prepare(self) -> Tuple[Job, JobSpec]:
        """Check, pickle and register this process for launch; nothing is submitted."""
        self._check_closed()
        if self._job is not None:
            raise ProcessStateError("cannot start a process twice")
        if self._parent_pid != here.pid:
            raise ProcessStateError("can only start a process object created by current process")
        if here.jobs.current_process._config.get("daemon"):  # noqa: SLF001
            raise ProcessStateError("daemonic processes are not allowed to have children")
        cfg = get_config()
        backend = backend_of(type(self))
        _launcher.check_reachable(backend)
        try:
            with collecting_handoffs() as handoffs:
                pickled, spawn = _fd_handoff.pickle_process(self, backend)
        except PICKLING_ERRORS as e:
            with probing():
                error = self._explained(e)
            raise error from None
        # what a spawn child of multiprocessing inherits: the program's argv, path,
        # working directory, multiprocessing authkey and start method (the interpreter
        # flags are on the job's command line)
        launch = {"config": cfg, "process": pickled, "sys_path": list(sys.path),
                  "argv": list(sys.argv), "cwd": os.getcwd(),
                  "parent": (self._parent_name, here.pid),
                  "mp_authkey": _fd_handoff.multiprocessing_authkey(),
                  "start_method": self._start_method or default_method(),
                  # the job's lifelines (see _lineage)
                  "master": master_address(), "lifeline": lifeline_address(self)}
        if spawn is not None:  # it holds objects of multiprocessing itself
            launch["spawn"] = spawn
        level = program_level()
        if level is not None:  # as a spawn child inherits its multiprocessing logger's
            launch["log_level"] = level
        payload = dumps(launch)
        token = secrets.token_bytes(16)
        job = Job(backend, token, handoffs)
        _launcher.launcher().add(token, _launcher.Launch(
            payload, on_started=lambda pid, host: self._on_started(job, pid, host),
            on_exit_report=lambda code: self._on_exit_report(job, code),
            on_gone=lambda silent: self._on_gone(job, silent), name=self._name,
            tagged=self._tagged_output))
        asked = self._resources or resources_of(self._target) or Resources()
        return job, _launcher.job_spec(cfg, token, asked, self._name, backend,
                                       self._avoid_hosts)

    def _launched(self, job: Job, handle: JobHandle) -> None:
        """Make the submitted job this process's. It counts as started (a child that
        the exit handler joins) only once everything else is done: what fails before
        leaves the job to `start_all` to end (see ``Job.withdraw``)."""
        job.handle = handle
        if handle.output is not None:  # the read ends of its pipes: this process's now
            _launcher.launcher().capture(job.token, handle.output)
        log("started %s as %s job %s", self._name, job.backend.name, handle.job_id)
        job.backend.watcher().watch(handle, lambda h, status: self._on_finished(job, status))
        # the watcher holds this object until the job ends; once it is gone too, nothing
        # can ask the backend about the job again, nor wait on its sentinel (closed then,
        # as multiprocessing does, or every process started would keep a descriptor)
        # Not at exit: threads still wait on the sentinel then (a pool's), and the
        # process's end releases everything anyway.
        weakref.finalize(self, collect, job).atexit = False  # type: ignore[misc, unused-ignore]
        release_collected()
        hub = _runtime.hub()
        ref = weakref.ref(self)  # the timer must not keep an ended process alive

        def check() -> None:
            proc = ref()
            if proc is not None:
                job.cancel_if_not_started(proc.name)

        with hub.lock:
            hub.call_later(get_config().startup_timeout, check)
        _register_exit_function()
        # As multiprocessing: the job has its own copy, and what was handed to it (a
        # manager's object, a big array) must not live on in this process because of us.
        self._target, self._args, self._kwargs = None, (), {}
        self._job = job
        here.jobs.children.add(self)

    def _on_finished(self, job: Job, status: JobStatus) -> None:
        say_end(self, self._name, job, status)
        job.finish(status)

    def _on_started(self, job: Job, pid: int, host: str) -> None:
        job.remote_pid, job.remote_host = pid, host

    def _on_exit_report(self, job: Job, code: int) -> None:
        job.reported = code

    def _on_gone(self, job: Job, silent: bool) -> None:
        if silent:
            say_lost_contact(self, self._name, job)
        # A child that reported its exit and hung up is done; the backend's own view may
        # lag by a poll interval, unless it sees exits at once: then wait for it (exact).
        if (job.reported is not None and job.handle is not None
                and not job.backend.sees_exits_at_once):
            code = job.reported
            job.finish(JobStatus(JobState.SUCCEEDED if code == 0 else JobState.FAILED, code))

    def join(self, timeout: Optional[float] = None) -> None:
        """Wait until the process ends, or ``timeout`` seconds pass.

        Returns None either way, as multiprocessing's: ``exitcode`` tells which.

        Raises:
            fiber.errors.ProcessStateError (an AssertionError): not started, or not ours.
            ValueError: the process object was closed.
        """
        self._check_closed()
        if self._parent_pid != here.pid:
            raise ProcessStateError("can only join a child process")
        if self._job is None:
            raise ProcessStateError("can only join a started process")
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._job.wait(timeout):
            here.jobs.children.discard(self)
            # what it wrote is on this terminal when join returns (a killed job's last
            # output may still be coming), within timeout (a grandchild may hold it open)
            left = _OUTPUT_WAIT_S if deadline is None else deadline - time.monotonic()
            _launcher.launcher().wait_output(self._job.token, max(0.0, min(_OUTPUT_WAIT_S, left)))

    def is_alive(self) -> bool:
        """Whether the process has started and its job has not ended yet.

        On the local backend the job's state is asked for now; on the others it is what the
        job watcher last saw (it polls all jobs at once) or what the job's connection tells.
        A process found ended leaves `fiber.active_children`.

        Raises:
            fiber.errors.ProcessStateError (an AssertionError): not called by the parent.
            ValueError: the process object was closed.
        """
        self._check_closed()
        if self is here.jobs.current_process:
            return True
        if self._parent_pid != here.pid:
            raise ProcessStateError("can only test a child process")
        job = self._job
        if job is None:
            return False
        if not job.finished and job.handle is not None and job.backend.sees_exits_at_once:
            st = job.backend.status([job.handle])[job.handle.job_id]
            if st.state.finished:
                job.finish(st)
        if job.finished:
            here.jobs.children.discard(self)
            return False
        return True

    def terminate(self) -> None:
        """Ask the job to end (SIGTERM on the local backend)."""
        self._check_closed()
        if self._job is not None and self._job.handle is not None and not self._job.finished:
            self._job.cancel_requested = True
            self._job.backend.cancel([self._job.handle])

    def kill(self) -> None:
        """End the job at once (SIGKILL on the local backend)."""
        self._check_closed()
        if self._job is not None and self._job.handle is not None and not self._job.finished:
            self._job.cancel_requested = True
            self._job.backend.cancel([self._job.handle], force=True)

    def close(self) -> None:
        """Release the process's resources; it must have ended.

        Raises:
            ValueError: the process is still running.
        """
        if self._closed:
            return
        if self._job is not None and not self._job.finished and self._parent_pid == here.pid:
            self.is_alive()  # as multiprocessing polls it: exited, it has ended
        if not release_ended(self):
            raise ValueError("Cannot close a process while it is still running. "
                             "You should first call join() or terminate().")
        self._closed = True

    def _check_closed(self) -> None:
        if self._closed:
            raise ValueError("process object is closed")

    # -- attributes (name, daemon, authkey, host, job_id...: see _attributes) ---------------

    @property
    def exitcode(self) -> Optional[int]:
        """The exit code: None while running (or not started), ``-N`` if ended by signal N.

        A job cancelled or lost by its backend with no code of its own reports ``-9``
        (``-signal.SIGKILL``), as if killed; one that failed with no code reports 1.

        Raises:
            ValueError: the process object was closed.
        """
        self._check_closed()
        if self._job is None:
            return None
        if not self._job.finished:
            self.is_alive()
        return self._job.exitcode()

    @property
    def ident(self) -> Optional[int]:
        """The process's id (``pid`` is the same): None until started.

        On backends that know the job's pid (local) it is that pid; on others (Slurm,
        Kubernetes...) a number unique in this program, above any Linux pid, since the job's
        pid is on another host. Do not pass it to ``os.kill``; use ``terminate`` or ``kill``.

        Raises:
            ValueError: the process object was closed.
        """
        self._check_closed()
        if self is here.jobs.current_process:
            return here.pid
        job = self._job
        if job is None or job.handle is None:
            return None
        if job.handle.pid is not None:
            return job.handle.pid
        return _SYNTHETIC_PID_BASE + self._identity[-1] + 1000 * len(self._identity)

    pid = ident
    """The process's id: the same as ``ident``."""

    @property
    def sentinel(self) -> int:
        """A file descriptor that becomes readable (EOF) when the process has ended.

        Raises:
            ValueError: the process was not started, or its object was closed.
        """
        self._check_closed()
        if self._job is None:
            raise ValueError("process not started")
        return self._job.sentinel_r

    def __repr__(self) -> str:
        """As multiprocessing's (name, pid, parent, state), with the job and its host:
        ``<Process name='PoolWorker-3' pid=4242 parent=4200 job=4200-3 host=node2
        started daemon>``; ``pid`` is the job's pid on its host once it has said it."""
        if self is here.jobs.current_process:
            return f"<{type(self).__name__} name={self._name!r} pid={here.pid} started>"
        code = None if self._closed or self._job is None else self.exitcode
        ident = None if self._closed else self.ident  # a closed one's raises ValueError
        return _describe.process_repr(type(self).__name__, self._name, self._job, code,
                                      self._parent_pid, ident, self._closed, self.daemon)

    def __getstate__(self) -> Dict[str, object]:
        state = self.__dict__.copy()
        state["_job"] = None
        state["_counter"] = None
        return state

    def __setstate__(self, state: Dict[str, object]) -> None:
        self.__dict__.update(state)
        self._counter = itertools.count(1)

    # -- in the child -----------------------------------------------------------------------

    def _bootstrap(self) -> int:
        """Run in the child: ``run()`` then the exit protocol; returns the exit code."""
        here.jobs.current_process = self
        name_process(self.name)
        here.jobs.children.clear()
        try:
            self.run()
            exitcode = 0
        except SystemExit as e:
            exitcode = exit_code_of(e)
        except BaseException as e:
            # as multiprocessing prints it, from the user's first frame (see remote.py)
            sys.stderr.write(f"Process {self.name}:\n{format_user_exception(e)}")
            exitcode = 1
        finally:
            _exit_function()
            # As a spawn child of multiprocessing's: the process ends when its non-daemon
            # threads have, then runs its atexit handlers (before _bootstrap's os._exit).
            getattr(threading, "_shutdown", lambda: None)()
            getattr(atexit, "_run_exitfuncs", lambda: None)()
            _runtime.run_end_hooks()  # its threads are done; its connections still open
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
        return exitcode


class _MainProcess(Process):
    def __init__(self) -> None:
        self._identity = ()
        self._name = "MainProcess"
        self._parent_pid = None  # type: ignore[assignment]
        self._job = None
        self._closed = False
        self._counter = itertools.count(1)
        self._config = {}
        self._target = None
        self._args = ()
        self._kwargs = {}
        self._resources = None

    def close(self) -> None:
        pass


here.jobs.current_process = _MainProcess()


def current_process() -> Process:
    """The Process object of the calling process."""
    return here.jobs.current_process


def active_children() -> List[Process]:
    """Started children of this process that have not ended yet (reaps the others)."""
    out = []
    for p in list(here.jobs.children):
        try:
            if p.is_alive():
                out.append(p)
        except ValueError:  # closed since the list was taken, by the thread that saw it end
            pass
    return out


# -- what other modules of fiber need of a Process (its owning module's API) ---------------
# (its private state is read and set here only: noqa SLF001 below)


def set_resources(proc: Process, resources: Optional[Resources]) -> None:
    """What ``proc``'s job asks the cluster for, instead of its target's ``@fiber.meta``
    (a pool's workers, a manager's object jobs). Before ``start``."""
    proc._resources = resources  # noqa: SLF001


def set_placement(proc: Process, avoid_hosts: FrozenSet[str]) -> None:
    """Hosts ``proc``'s job is not to be placed on, where its backend can choose (a
    pool's replacement workers: not on a host that is cut off). Before ``start``."""
    proc._avoid_hosts = avoid_hosts  # noqa: SLF001


def exitcode_of(proc: Process) -> Optional[int]:
    """``proc.exitcode``, also once the program closed ``proc``: its owner (a pool) still
    learns how the job it started ended, when the program joined and closed it first."""
    try:
        return proc.exitcode
    except ValueError:  # closed: it had ended, and its job said how
        job = proc._job  # noqa: SLF001
        return None if job is None else job.exitcode()


def release_ended(proc: Process, owner: bool = False) -> bool:
    """Free what the ended ``proc`` holds (its sentinel's descriptor) and forget it as a
    child, as ``close()`` does, but leave the object usable: its owner (a pool, a ring)
    ended it, not the program, which may still ``join`` it or read its ``exitcode`` (a
    worker it found in `active_children` a moment before, say: ``multiprocessing.Pool``
    never closes its workers either). Its ``sentinel`` is -1 from then on. A sentinel
    its owner keeps (`keep_sentinel`) is closed by the ``owner`` alone. False (and
    nothing done) if it has not ended."""
    job = proc._job  # noqa: SLF001
    if job is not None:
        if not job.finished:
            return False
        if owner or not job.sentinel_kept:
            job.close_sentinel()
    here.jobs.children.discard(proc)
    return True


def keep_sentinel(proc: Process) -> None:
    """The started ``proc``'s owner (a pool's maintainer) watches its sentinel in a
    selector until it has seen the end, and then closes it (``release_ended(proc,
    owner=True)``): the program that joins and closes ``proc`` first must not close the
    descriptor under the selector (which would forget it without a word, and refuse the
    next one given its number)."""
    job = proc._job  # noqa: SLF001
    if job is not None:
        job.sentinel_kept = True


def mark_tagged_output(proc: Process) -> None:
    """``proc``'s output lines may each name the process that wrote them (a job of
    several pool workers: see fiber.pool._tagged). Before ``start``."""
    proc._tagged_output = True  # noqa: SLF001


def mark_daemonic(proc: Process) -> None:
    """End ``proc`` with this process, as a daemonic child, though it was started as
    a non-daemonic one (which may start children of its own)."""
    proc._config["daemon"] = True  # noqa: SLF001


def run_in_job(proc: Process) -> int:
    """In a job: run ``proc`` (``run()``, then the exit protocol); its exit code."""
    return proc._bootstrap()  # noqa: SLF001


def kill_children() -> None:
    """Kill every child started and not joined yet, at once (this job's parent is gone:
    its children must not outlive it)."""
    for child in list(here.jobs.children):
        try:
            child.kill()
        except Exception:
            pass


def _register_exit_function() -> None:
    if not here.jobs.exit_registered:
        here.jobs.exit_registered = True
        atexit.register(_exit_function)
        # fiber top lists this process's children (see fiber._core._inspect)
        _inspect.add_source("processes", here.jobs.current_process,
                            lambda _: _describe.children(live_jobs(),
                                                         _inspect.rows_wanted()))


def live_jobs() -> List[Tuple[Process, Optional[Job]]]:
    """This process's children not joined yet, each with its job (None: not started)."""
    return [(c, c._job) for c in list(here.jobs.children)]  # noqa: SLF001 - this module's class


def terminate_all(processes: Sequence[Process], force: bool = False) -> None:
    """End many processes with one ``cancel`` per backend (one ``scancel`` on Slurm)."""
    by_backend: Dict[int, List[Job]] = {}
    for proc in processes:
        job = proc._job  # noqa: SLF001 - this module's class
        if job is not None and job.handle is not None and not job.finished:
            job.cancel_requested = True
            by_backend.setdefault(id(job.backend), []).append(job)
    for jobs in by_backend.values():
        try:
            jobs[0].backend.cancel([job.handle for job in jobs if job.handle], force=force)
        except Exception as e:  # one backend failing must not stop the others
            sys.stderr.write(f"fiber: cannot cancel {len(jobs)} jobs: {e}\n")


def program_exiting() -> bool:
    """Whether this process has begun to end its children at exit (see
    `_exit_function`): a pool then replaces no worker it loses."""
    return here.jobs.process_exiting.is_set()


def _exit_function() -> None:
    """At exit, as multiprocessing does: end daemonic children, wait for the others.

    A pool's maintainer would replace the workers ended here (multiprocessing terminates
    its pools first): it starts none once `program_exiting`, and a daemonic child
    started meanwhile is ended before it is waited for, not waited for for ever."""
    here.jobs.process_exiting.set()
    terminate_all([p for p in active_children() if p.daemon])
    for p in active_children():
        if p.daemon and not p.cancelled:
            terminate_all([p])
        try:
            p.join()
        except ValueError:  # closed meanwhile by a thread that saw it end (a pool's)
            pass
