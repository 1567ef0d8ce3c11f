"""The ``local`` backend: every job is a process on this machine. The default. A job is forked
by the fork server or is a subprocess, and its exit is seen at once. The design:
docs/contributing/backend-design.md, "The local backend"."""

from __future__ import annotations

import dataclasses
import functools
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from ... import _machine
from ..._process_state import here
from ...config import Config, get_config, settings
from ...errors import SubmitError
from .._base import JobHandle, JobInfo, JobOutput, JobSpec, JobState, JobStatus, JobWatcher
from .._cli_backend import CommandLineBackend
from .._job_command import JOB_LOG_ENV, bootstrap_parts, interpreter_flags
from . import _forkserver, _jobs
from ._forkserver import ForkedJob, ForkServerError
from ._gpus import GPU_ENV, GpuPool, host_gpus
from ._settings import LocalSettings

__all__ = ["LocalBackend"]

_JOB_ENV = "FIBER_JOB"  # set in the environment of every fiber job (the bootstrap's)


def _own(cfg: Optional[Config] = None) -> LocalSettings:
    """The local backend's settings in ``cfg`` (or the config in force)."""
    return settings(LocalSettings, "local", cfg)


#: A running job's status, one for all (it is frozen): the dashboard asks for a
#: Pool(1024)'s 1,024 every 5 s (with `LocalBackend.status` taking its lock once, not
#: a job: 3.3 -> 2.1 ms a call under load).
_RUNNING = JobStatus(JobState.RUNNING)


def _status_of(returncode: Optional[int]) -> JobStatus:
    if returncode is None:
        return _RUNNING
    if returncode == 0:
        return JobStatus(JobState.SUCCEEDED, 0)
    if returncode < 0:
        try:
            reason = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            reason = f"killed by signal {-returncode}"
        return JobStatus(JobState.FAILED, returncode, reason)
    return JobStatus(JobState.FAILED, returncode, f"exit code {returncode}")


_Proc = Union["subprocess.Popen[bytes]", ForkedJob]


def _open_job_log(job_id: str, name: str) -> Tuple[int, str]:
    """A fiber job's log file (``fiber logs``), opened to append, and its path.

    Raises:
        OSError: the logs' folder cannot be written.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    path = _machine.job_log(job_id, name)
    try:
        return os.open(path, flags, 0o600), path
    except FileNotFoundError:  # its directory, empty, was just pruned: made again
        path = _machine.job_log(job_id, name)
        return os.open(path, flags, 0o600), path


def _current_status(proc: _Proc) -> JobStatus:
    if isinstance(proc, ForkedJob):
        proc.await_report(_forkserver.REPORT_TIMEOUT)
        if proc.lost_reason:
            return JobStatus(JobState.LOST, None, proc.lost_reason)
        return _status_of(proc.returncode)
    code = proc.poll()
    if code is None and _exited(proc.pid):
        # Another thread's poll() is reaping it (Popen lets one thread at a time, and the
        # other's poll() says None): its code is set in a moment. multiprocessing's poll
        # finds an exited child ended, and close() right after an exit must too.
        try:
            code = proc.wait(_forkserver.REPORT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
    return _status_of(code)


def _exited(pid: int) -> bool:
    """Whether this process's child ``pid`` has exited: a zombie not reaped yet, or
    reaped already (not a child any more)."""
    if not hasattr(os, "waitid"):
        return False
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _note_once(message: str) -> None:
    noted = here.jobs.local_noted
    if message not in noted:
        noted.add(message)
        sys.stderr.write(f"fiber: {message}\n")
        sys.stderr.flush()


class LocalBackend(CommandLineBackend):
    """Run jobs as subprocesses on this machine."""

    name = "local"
    settings = LocalSettings
    jobs_share_host = True
    jobs_share_network = True
    passes_fds = True
    files_per_job = 9  # + a pidfd, its stdout and stderr pipes, its end while handed over
    jobs_are_children = True
    sees_exits_at_once = True

    def __init__(self) -> None:
        self._procs: Dict[str, _Proc] = {}
        self._lock = threading.Lock()
        self._ids = here.jobs.local_job_numbers  # shared: a job id names one job of this process
        self._gpus: Optional[GpuPool] = None  # made when a job first asks for a GPU
        #: The log of each job with one whose end has not been recorded yet (see _status).
        self._logged: Dict[str, str] = {}
        self._pruned_at: Optional[float] = None  # when this process last pruned records

    def command_prefix(self, spec: JobSpec, index: int) -> List[str]:
        """Words put before a job's command; subclasses use it to place jobs elsewhere."""
        return []

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Start each job as a child of this process: forked from the template, or a new
        interpreter (``local_fork_server=false``).

        Raises:
            SubmitError: a job cannot start, or asks for GPUs this host cannot give.
        """
        base_env = {k: v for k, v in os.environ.items() if k != _machine.PROGRAM_ENV}
        program = {_machine.PROGRAM_ENV: _machine.program_id()}  # a fiber job's, not a main's
        self._check_gpus(specs)
        jobs = []
        stdio: Dict[str, Tuple[int, int]] = {}  # a job's fds 1 and 2, if not this process's
        outputs: Dict[str, JobOutput] = {}  # the read ends of captured jobs' pipes
        log_paths: Dict[str, str] = {}
        try:
            for spec in specs:
                index = next(self._ids)
                job_id = f"{here.pid}-{index}"
                prefix = self.command_prefix(spec, index)
                if spec.inherit and not self.passes_fds:
                    raise SubmitError(f"the {self.name} backend hands its jobs no descriptors")
                env = {**base_env, **spec.env, **(program if _JOB_ENV in spec.env else {})}
                env.update(self._resources_env(job_id, spec))
                jobs.append((job_id, prefix + list(spec.command), env, bool(prefix),
                             dict(spec.inherit)))
                self._open_output(job_id, spec, env, stdio, outputs, log_paths)
            forked = self._fork_all([(job_id, argv, env, stdio.get(job_id), inherit)
                                     for job_id, argv, env, placed, inherit in jobs
                                     if not placed and self._forkable(argv)])
            handles = []
            for job_id, argv, env, _, inherit in jobs:
                proc: Optional[_Proc] = forked.get(job_id)
                if proc is None:
                    out, err = stdio.get(job_id, (None, None))
                    env = {**env, **{name: str(fd) for name, fd in inherit.items()}}
                    try:
                        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                                stdout=out, stderr=err, close_fds=True,
                                                pass_fds=tuple(inherit.values()))
                    except OSError as e:
                        raise SubmitError(f"cannot start local job: {e}", command=argv) from e
                with self._lock:
                    self._procs[job_id] = proc
                    if job_id in log_paths:
                        self._logged[job_id] = log_paths[job_id]
                if job_id in log_paths:
                    _jobs.note_started(log_paths[job_id], proc.pid)
                handles.append(JobHandle(job_id, self.name, host="localhost", pid=proc.pid,
                                         output=outputs.pop(job_id, None)))
            if log_paths:
                self._prune_records()
            return handles
        except BaseException:
            for job_id, *_ in jobs:
                if job_id not in self._procs and self._gpus is not None:
                    self._gpus.release(job_id)
            for output in outputs.values():  # not handed over: nobody else closes them
                os.close(output.stdout_fd)
                os.close(output.stderr_fd)
            raise
        finally:
            for fds in stdio.values():  # the jobs have them now
                for fd in set(fds):
                    os.close(fd)

    def _open_output(self, job_id: str, spec: JobSpec, env: Dict[str, str],
                     stdio: Dict[str, Tuple[int, int]], outputs: Dict[str, JobOutput],
                     log_paths: Dict[str, str]) -> None:
        """Where job ``job_id`` writes: pipes whose read ends go back to the caller (a
        spec with ``capture_output``), its own log file (a fiber job whose output is
        forwarded by the job itself), or this process's stdout and stderr (the rest)."""
        if spec.capture_output:
            path = self._new_log(job_id, spec)
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            stdio[job_id] = (out_w, err_w)
            outputs[job_id] = JobOutput(out_r, err_r, path)
            if path is not None:
                log_paths[job_id] = env[JOB_LOG_ENV] = path
            return
        log = self._open_log(job_id, spec)
        if log is not None:
            fd, log_paths[job_id] = log
            stdio[job_id] = (fd, fd)

    def _gpu_pool(self) -> GpuPool:
        """The host's GPUs (made again if what the host reports has changed)."""
        gpus = host_gpus()
        if self._gpus is None or self._gpus.gpus != gpus:
            source = (f"{GPU_ENV}={os.environ[GPU_ENV]}" if GPU_ENV in os.environ
                      else "nvidia-smi -L")
            self._gpus = GpuPool(gpus, source)
        return self._gpus

    def _check_gpus(self, specs: Sequence[JobSpec]) -> None:
        """Refuse at once a batch (a pool's workers) that needs more GPUs than the host has.

        Raises:
            SubmitError: it does.
        """
        asked = [int(s.resources.gpu) for s in specs if s.resources.gpu]
        if len(asked) > 1 and sum(asked) > len(self._gpu_pool().gpus):
            self._gpu_pool().check(sum(asked), f"{len(asked)} jobs ask for {sum(asked)} "
                                               f"GPUs in all (gpu={max(asked)} each)")

    def _resources_env(self, job_id: str, spec: JobSpec) -> Dict[str, str]:
        """The environment that gives the job its resources: its own GPUs (see ._gpus).
        CPUs and memory are not enforced here (warned once)."""
        res = spec.resources
        if res.memory_mb or (res.cpu is not None and res.cpu != 1 and not res.cpu_implied):
            _note_once(f"the {self.name} backend does not enforce cpu= and memory= (jobs "
                       "share this machine's CPUs and memory); it does enforce gpu= (each "
                       "job gets GPUs of its own)")
        if not res.gpu:
            return {}
        return {GPU_ENV: ",".join(self._gpu_pool().take(int(res.gpu), job_id=job_id,
                                                        ended=self._ended))}

    def _ended(self, job_id: str) -> bool:
        proc = self._proc_by_id(job_id)
        return proc is not None and self._status(job_id, proc).state.finished

    def _status(self, job_id: str, proc: _Proc) -> JobStatus:
        """The job's status; the first time it is seen ended, how it ended is written to
        its record (if it has a log). Only this process learns that (it is the job's
        parent, or the master of the fork server that is), and ``fiber ps`` runs in
        another."""
        status = _current_status(proc)
        if status is not _RUNNING and status.state.finished and job_id in self._logged:
            with self._lock:
                path = self._logged.pop(job_id, None)
            if path is not None:
                _jobs.note_ended(path, proc.pid, status.exitcode)
        return status

    def _proc_by_id(self, job_id: str) -> Optional[_Proc]:
        with self._lock:
            return self._procs.get(job_id)

    def _prune_records(self) -> None:
        """Prune the records of ended jobs (see ._jobs) as this process records new ones,
        when no process did for ``PRUNE_EVERY_S`` seconds (asked at its first, then at
        most that often)."""
        now = time.monotonic()
        if self._pruned_at is None or now - self._pruned_at >= _jobs.PRUNE_EVERY_S:
            self._pruned_at = now
            try:
                if _jobs.prune_due():
                    _jobs.prune()
            except OSError:  # the user directory is unusable: the logs said so already
                pass

    @staticmethod
    def _open_log(job_id: str, spec: JobSpec) -> Optional[Tuple[int, str]]:
        """A fiber job whose output is forwarded to its parent writes its own log to a
        file (``fiber logs``); other jobs, and all with ``forward_output=false``, write to
        this process's stdout and stderr, as subprocesses do."""
        if not get_config().forward_output or _JOB_ENV not in spec.env:
            return None
        try:
            fd, path = _open_job_log(job_id, spec.name)
            return fd, path
        except OSError as e:
            _note_once(f"cannot write local job logs ({e}); jobs write to this terminal")
            return None

    @staticmethod
    def _new_log(job_id: str, spec: JobSpec) -> Optional[str]:
        """The log file of a fiber job (``fiber logs``), made empty, for its parent to
        append the job's output to; None where the logs' folder cannot be written (said
        once) or for a job that is not fiber's."""
        if _JOB_ENV not in spec.env:
            return None
        try:
            fd, path = _open_job_log(job_id, spec.name)
            os.close(fd)
            return path
        except OSError as e:
            _note_once(f"cannot write local job logs ({e}); jobs write to this terminal")
            return None

    @staticmethod
    def _forkable(argv: List[str]) -> bool:
        """Whether the fork server may start this command: the bootstrap, with this
        interpreter and this process's flags (the template's)."""
        parts = bootstrap_parts(argv)
        return (parts is not None and _forkserver.supported()
                and os.path.abspath(parts[0]) == os.path.abspath(sys.executable)
                and list(parts[1]) == interpreter_flags() and _own().fork_server)

    def _fork_all(self, jobs: List[Tuple[str, List[str], Dict[str, str],
                                         Optional[Tuple[int, int]], Dict[str, int]]]
                  ) -> Dict[str, ForkedJob]:
        """The jobs the fork server forked, by job id; the others start as subprocesses."""
        if not jobs:
            return {}
        cfg = get_config()
        try:
            server = _forkserver.get_server(sys.executable, _own(cfg).preload)
        except ForkServerError as e:
            _note_once(f"{e}; local jobs start as subprocesses")
            return {}
        if cfg.debug and server.preload_failures:
            _note_once(f"the fork server could not preload {server.preload_failures}")
        try:
            cwd: Optional[str] = os.getcwd()
        except OSError:
            cwd = None
        results = server.fork_many([(argv, env, functools.partial(self._forked_job_ended,
                                                                  job_id), stdio, inherit)
                                    for job_id, argv, env, stdio, inherit in jobs], cwd)
        out = {}
        for (job_id, *_), result in zip(jobs, results):
            if isinstance(result, ForkServerError):
                _note_once(f"{result}; this job starts as a subprocess")
            else:
                out[job_id] = result
        return out

    def _forked_job_ended(self, job_id: str) -> None:
        """A forked job's exit was reported (on the fork server's reader thread)."""
        w = self.__dict__.get("_watcher")
        if isinstance(w, _PidfdWatcher):
            w.ended(job_id)
        elif w is not None:
            w.wake()

    def proc_of(self, handle: JobHandle) -> Optional[_Proc]:
        """The subprocess or forked job of ``handle``, if this backend started it."""
        with self._lock:
            return self._procs.get(handle.job_id)

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        """Each job's state from its process (``LOST`` for a job this backend did not
        start)."""
        with self._lock:  # once, not a job
            procs = [(h.job_id, self._procs.get(h.job_id)) for h in handles]
        return {job_id: JobStatus(JobState.LOST, None, "unknown job") if proc is None
                else self._status(job_id, proc) for job_id, proc in procs}

    def wait(self, handle: JobHandle, timeout: Optional[float] = None) -> Optional[JobStatus]:
        """Wait for the job's process to end (its status), or ``timeout`` (None)."""
        proc = self.proc_of(handle)
        if proc is None:
            return JobStatus(JobState.LOST, None, "unknown job")
        if isinstance(proc, ForkedJob):
            return self._status(handle.job_id, proc) if proc.wait(timeout) else None
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self._status(handle.job_id, proc)

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        """SIGTERM (SIGKILL with ``force``) each job still running."""
        for h in handles:
            proc = self.proc_of(h)
            if proc is not None and not self._status(h.job_id, proc).state.finished:
                try:
                    proc.send_signal(signal.SIGKILL if force else signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def prepare(self) -> None:
        """Start this process's fork server now (see `Backend.prepare`)."""
        if _forkserver.supported() and _own().fork_server:
            try:
                _forkserver.get_server(sys.executable, _own(get_config()).preload)
            except ForkServerError:
                pass  # the first submit says so, and starts its jobs as subprocesses

    def listen_host(self) -> str:
        """``127.0.0.1``: the jobs are on this machine."""
        return "127.0.0.1"

    # -- fiber ps, logs, stop: this user's programs on this machine (see ._jobs) ----------

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        """This user's fiber programs on this machine and their jobs (``fiber ps``)."""
        return _jobs.find_jobs(program)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        """A local job's own log file (``fiber logs``).

        Raises:
            BackendError: no log of that job is kept here.
        """
        return _jobs.read_logs(job_id, tail)

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        """SIGTERM a program's main process and its jobs still running, or the jobs named
        (``fiber stop``)."""
        return _jobs.remove_jobs(program, job_ids)

    def main_spec(self, spec: JobSpec) -> JobSpec:
        """A main program here runs on this machine: it keeps this machine's listen_host."""
        host = get_config().listen_host
        return dataclasses.replace(spec, env={**spec.env, "FIBER_LISTEN_HOST": host})

    def release(self, handle: JobHandle) -> None:
        """Forget a finished job (and give its GPUs back)."""
        proc = self.proc_of(handle)
        if proc is None or not self._status(handle.job_id, proc).state.finished:
            return
        if self._gpus is not None:
            self._gpus.release(handle.job_id)
        with self._lock:
            if self._procs.get(handle.job_id) is proc:
                del self._procs[handle.job_id]

    def watcher(self) -> JobWatcher:
        """The watcher of this backend's jobs: one that sees each exit at once (pidfds and
        the fork server's reports) where the kernel has pidfds, else the polling one."""
        if not hasattr(os, "pidfd_open"):
            return super().watcher()
        w: Optional[JobWatcher] = self.__dict__.get("_watcher")
        if w is None:
            with self._lock:
                w = self.__dict__.setdefault("_watcher", _PidfdWatcher(self))
        return w


class _PidfdWatcher(JobWatcher):
    """Sees each child's exit the moment it happens: a pidfd per subprocess in one epoll,
    and the fork server's exit reports for forked jobs.

    The work done is proportional to what happened, not to the jobs watched: a new job
    or a reported exit is queued for the watcher thread, which looks at those alone (a
    pool of 1,024 workers is not 1,024 scans of 1,024 jobs). A full sweep every
    ``SWEEP_S`` seconds is the safety net for an exit nobody reported.
    """

    SWEEP_S = 5.0

    def __init__(self, backend: LocalBackend) -> None:
        super().__init__(backend)
        self._local = backend
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._touched: Set[str] = set()  # new or reported ended, under self._cond

    def watch(self, handle, on_exit) -> None:  # type: ignore[no-untyped-def]
        with self._cond:
            self._touched.add(handle.job_id)
        super().watch(handle, on_exit)
        self._wake()

    def ended(self, job_id: str) -> None:
        """A forked job's exit was reported, or a subprocess was found reaped already:
        its end is read in the next round."""
        with self._cond:
            self._touched.add(job_id)
        self._wake()

    def _wake(self) -> None:
        wake_w = self._wake_w
        if wake_w < 0:
            return  # the watcher has ended and closed its pipe
        try:
            os.write(wake_w, b"x")
        except (BlockingIOError, OSError):
            pass

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
        self._wake()
        super().stop()

    def _deliver_ended(self, job_ids: Iterable[str]) -> List[str]:
        """Call back (and stop watching) the jobs of ``job_ids`` that ended; the ids of
        those still running. A method of its own: a delivered callback holds its process
        object, which must not stay referenced by ``_run``'s locals while it waits."""
        running = []
        for job_id in job_ids:
            with self._cond:
                entry = self._jobs.get(job_id)
            if entry is None:
                continue
            handle, on_exit = entry
            try:
                status = self._local.status([handle])[job_id]
            except Exception:  # as the base watcher: asked again (the sweep at the latest)
                traceback.print_exc()
                continue
            if status.state.finished:
                with self._cond:
                    self._jobs.pop(job_id, None)
                self._call_back(on_exit, handle, status)
            else:
                running.append(job_id)
        return running

    def _run(self) -> None:
        # Each round looks at the jobs touched since the last one *before* waiting: a job
        # watched, or a forked job reported, while we waited is seen in the next round
        # (the wake byte that announced it ends the wait), never one wait later.
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ, None)
        fds: Dict[str, int] = {}
        next_sweep = time.monotonic() + self.SWEEP_S
        try:
            while True:
                with self._cond:
                    if self._stopped:
                        return
                    touched, self._touched = self._touched, set()
                    if time.monotonic() >= next_sweep:
                        touched.update(self._jobs)
                        next_sweep = time.monotonic() + self.SWEEP_S
                for job_id in self._deliver_ended(touched):
                    if job_id not in fds:
                        self._watch_pidfd(sel, fds, job_id)
                for job_id in [j for j in fds if j not in self._jobs]:
                    fd = fds.pop(job_id)
                    sel.unregister(fd)
                    os.close(fd)
                ready = [key.data for key, _ in sel.select(1.0)]
                if None in ready:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except BlockingIOError:
                        pass
                with self._cond:
                    self._touched.update(j for j in ready if j is not None)
        finally:
            sel.close()
            for fd in fds.values():
                os.close(fd)
            # -1 first: a late wake must not write to a number a later pipe may have
            wake_r, wake_w = self._wake_r, self._wake_w
            self._wake_r = self._wake_w = -1
            os.close(wake_r)
            os.close(wake_w)

    def _watch_pidfd(self, sel: selectors.BaseSelector, fds: Dict[str, int],
                     job_id: str) -> None:
        """Add a subprocess's pidfd to ``sel``; forked jobs have none (the fork server's
        exit report wakes us)."""
        with self._cond:
            entry = self._jobs.get(job_id)
        if entry is None or entry[0].pid is None:
            return
        if isinstance(self._local.proc_of(entry[0]), ForkedJob):
            return
        try:
            fd = os.pidfd_open(entry[0].pid)
        except ProcessLookupError:  # already reaped: its end is read in the next round
            self.ended(job_id)  # (epoll refuses a stand-in such as /dev/null: EPERM)
            return
        except OSError:  # out of descriptors: the sweep sees its end (SWEEP_S late)
            return
        fds[job_id] = fd
        sel.register(fd, selectors.EVENT_READ, job_id)
