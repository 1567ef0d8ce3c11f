"""The ``ssh`` backend: every job a process started over ssh on a list of hosts; the ssh
client is the job, its output passed on by a relay on the host. The design, with its
diagram: docs/contributing/backends.md, "The ssh backend"."""

from __future__ import annotations

import atexit
import collections
import math
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Deque, Dict, FrozenSet, List, Optional, Sequence, Set, Tuple

from ..._process_state import here
from ...config import Config, get_config, settings
from ...errors import BackendError, SubmitError
from .._base import JobHandle, JobInfo, JobOutput, JobSpec, JobState, JobStatus
from .._cli_backend import CommandLineBackend
from .._common import route_to, route_toward
from .._job_command import bootstrap_parts
from . import _jobs
from ._hosts import DOWN, Host, HostTable
from ._session import (
    JOB_STUB,
    LOADER,
    SSH_FAILED,
    Session,
    keeper_source,
    launch_data,
    remote_command,
    ssh_base,
)
from ._settings import SshSettings

__all__ = ["SshBackend"]

_JOB_ENV = "FIBER_JOB"  # in the environment of every fiber job (its launch token)
#: Seconds a job's ssh client has to end after a KILL before it is killed itself.
_KILL_GRACE_S = 5.0
#: Connections a job tries (each to the best host then) before it fails to start.
_ATTEMPTS = 3
#: Seconds between looks at sessions being set up (is their stdin read yet?).
_OPENING_POLL_S = 0.02
#: Seconds between looks at ssh clients where the kernel has no pidfds.
_POLL_S = 0.2
#: Seconds the program's exit waits for its jobs' ssh clients to end.
_EXIT_WAIT_S = 2.0


def _own(cfg: Optional[Config] = None) -> SshSettings:
    return settings(SshSettings, "ssh", cfg)


class _Job:
    """A job of this backend: pending, then a session, then its final status."""

    def __init__(self, handle: JobHandle, argv: List[str], env: Dict[str, str], pipe: bool,
                 python: str, slots: int, own: SshSettings, out_w: Optional[int],
                 err_w: Optional[int]) -> None:
        self.handle = handle
        self.argv = argv
        self.env = env
        self.pipe = pipe  # its values go through a pipe (fiber's bootstrap), not its environ
        self.python = python
        self.slots = slots
        self.settings = own
        self.out_w, self.err_w = out_w, err_w  # the write ends of its captured output
        self.session: Optional[Session] = None
        self.status: Optional[JobStatus] = None
        self.cancel: Optional[int] = None  # the signal asked for
        self.attempts = 0
        self.pidfd = -1
        self.log: Optional[str] = None  # its log and record (fiber logs, ps, stop)
        self.avoid: FrozenSet[str] = frozenset()  # hosts not to start it on (JobSpec)

    def drop_output(self) -> None:
        """Close this process's copies of the output's write ends (the ssh client has its
        own, or the job is over: the hub's reader then sees the end)."""
        for fd in {self.out_w, self.err_w} - {None}:
            os.close(fd)  # type: ignore[arg-type]
        self.out_w = self.err_w = None


class SshBackend(CommandLineBackend):
    """Run jobs as processes started over ssh on the hosts of ``ssh_hosts``."""

    name = "ssh"
    settings = SshSettings
    # Its output goes through a relay on the host (fiber.process._relay), on a connection
    # of its own: the ssh client's pipes would carry it by way of sshd and the client,
    # where it can come after the results the job sent on its connection since; a
    # relay's lines are known printed before (`_relay._Relay._confirm`).
    jobs_are_children = False
    # + its ssh client's stdin pipe and its output (see _session): a local job's at most
    files_per_job = 9

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: Dict[str, _Job] = {}
        self._pending: Deque[_Job] = collections.deque()
        self._running: List[_Job] = []
        self._hosts = HostTable()
        self._thread: Optional[threading.Thread] = None
        self._wake_r = self._wake_w = -1
        self._log_dir = ""
        self._stopped = False
        self._noted: Set[str] = set()
        self._listen: Dict[str, str] = {}
        self._selector: Optional[selectors.BaseSelector] = None

    # -- submit ---------------------------------------------------------------------------

    def node_cpus(self) -> Optional[int]:
        """The slots of the smallest host of ``ssh_hosts`` (see `Backend.node_cpus`)."""
        return min((slots for _, slots in _own().host_list()), default=None)

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        """Queue one job per spec; each starts on the host with the most free slots, now
        or when slots free up. The first submit tries each host (ssh, and fiber in its
        Python) and says which cannot take jobs.

        Raises:
            SubmitError: no hosts are configured, none can be reached, a job asks for
                more slots than the largest host has, or for GPUs.
        """
        own = _own()
        listed = own.host_list()
        if not listed:
            raise SubmitError("the ssh backend has no hosts: set ssh_hosts "
                              "(FIBER_SSH_HOSTS=node1:8,node2:8)")
        cfg = get_config()
        jobs: List[_Job] = []
        try:
            for spec in specs:
                jobs.append(self._prepare(spec, own, cfg))
            with self._lock:
                self._hosts.update(listed)
                self._start_thread()
            if jobs:
                self._contact(own, jobs[0].python)
            with self._lock:
                self._check_fit(jobs)
                for job in jobs:
                    self._jobs[job.handle.job_id] = job
                    self._pending.append(job)
                # Placed here, not on the thread's next turn: a job that has a free slot
                # is starting when submit returns (its status says so at once), and the
                # jobs of one burst spread over the hosts as their slots say.
                failed = self._place()
        except BaseException:
            for job in jobs:
                job.drop_output()
                if job.handle.output is not None:
                    os.close(job.handle.output.stdout_fd)
                    os.close(job.handle.output.stderr_fd)
            raise
        self._wake()
        if failed:
            self.watcher().wake()
        return [job.handle for job in jobs]

    def _prepare(self, spec: JobSpec, own: SshSettings, cfg: Config) -> _Job:
        """A pending job of ``spec``: its remote command, its values, its output pipes."""
        if spec.inherit:
            raise SubmitError("the ssh backend hands its jobs no descriptors")
        res = spec.resources
        if res.gpu:
            raise SubmitError(f"the ssh backend does not hand out GPUs (gpu={res.gpu}): a "
                              "host's GPUs are its jobs' to share; ask for none and choose "
                              "devices in the job (CUDA_VISIBLE_DEVICES)")
        if res.memory_mb:
            self._note("the ssh backend does not enforce memory= (a job's host has what "
                       "it has); cpu= is the slots a job takes")
        parts = bootstrap_parts(spec.command)
        if parts is not None:
            python = own.python if own.python and not cfg.python else parts[0]
            argv = [python, *parts[1], "-c", JOB_STUB]
        else:  # not a fiber job: its command as it is, its values as its environment
            python = own.python or cfg.python or sys.executable
            argv = list(spec.command)
        env = {name: os.environ[name] for name in own.env_names() if name in os.environ}
        env.update(spec.env)
        job_id = f"ssh-{here.pid}-{next(here.jobs.ssh_job_numbers)}"
        log = self._new_log(job_id, spec)
        out_w = err_w = None
        output = None
        if spec.capture_output:  # the hub reads the pipes, and appends to the log
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            output = JobOutput(out_r, err_r, log)
        elif log is not None:  # forward_output off: the ssh client writes to the log
            out_w = err_w = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        handle = JobHandle(job_id, self.name, output=output)
        job = _Job(handle, argv, env, parts is not None, python,
                   max(1, math.ceil(res.cpu or 1)), own, out_w, err_w)
        job.log = log
        job.avoid = spec.avoid_hosts
        return job

    def _new_log(self, job_id: str, spec: JobSpec) -> Optional[str]:
        """A fiber job's log (``fiber logs``); None for another command (``fiber run``'s
        program writes to this process's stdout) or where logs cannot be written."""
        if _JOB_ENV not in spec.env:
            return None
        try:
            return _jobs.new_log(job_id, spec.name)
        except OSError as e:
            self._note(f"cannot write ssh job logs ({e}): fiber logs will not have them")
            return None

    def _contact(self, own: SshSettings, python: str) -> None:
        """Probe the hosts not tried yet (with this job's Python); if every host is down
        then, try the others again at once rather than fail on old news."""
        probed = self._hosts.contact(own, python, self._lock)
        with self._lock:
            stuck = self._hosts.all_down()
        if stuck:
            self._hosts.contact(own, python, self._lock, down_too=True, skip=probed)

    def _check_fit(self, jobs: Sequence[_Job]) -> None:
        """Refuse jobs that no host can ever hold, and any job while no host can take
        one (every host down, none running a job).

        Raises:
            SubmitError: one of these.
        """
        if self._hosts.all_down():
            raise SubmitError("no ssh host can take fiber's jobs: " + "; ".join(
                f"{h.name}: {h.reason}" for h in self._hosts.listed()))
        largest = self._hosts.largest()
        for job in jobs:
            if job.slots > largest:
                raise SubmitError(f"a job asks for {job.slots} slots (cpu), and the largest "
                                  f"ssh host has {largest}: {self._host_text()}")

    def _host_text(self) -> str:
        return ",".join(f"{h.name}:{h.slots}" for h in self._hosts.listed())

    def _note(self, message: str) -> None:
        if message not in self._noted:
            self._noted.add(message)
            sys.stderr.write(f"fiber: {message}\n")
            sys.stderr.flush()

    # -- the thread that starts and watches sessions ---------------------------------------

    def _start_thread(self) -> None:
        """The fiber-ssh thread, its wake pipe, the ssh logs' folder (under the lock)."""
        if self._thread is not None:
            return
        try:  # the program's folder, pruned by later programs: never left behind
            self._log_dir = _jobs.program_dir()
        except OSError:
            self._log_dir = tempfile.mkdtemp(prefix="fiber-ssh-")
        self._hosts.log_dir = self._log_dir
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="fiber-ssh", daemon=True)
        self._thread.start()
        atexit.register(self._at_exit)

    def _wake(self) -> None:
        if self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"x")
            except OSError:
                pass

    def _run(self) -> None:
        assert self._selector is not None
        while True:
            with self._lock:
                if self._stopped:
                    return
                ended = self._step()
                timeout = self._timeout()
            if ended:
                self.watcher().wake()
            for key, _ in self._selector.select(timeout):
                if key.fd == self._wake_r:
                    try:
                        while os.read(self._wake_r, 4096):
                            pass
                    except OSError:
                        pass

    def _timeout(self) -> Optional[float]:
        """How long the thread may sleep (under the lock): briefly while sessions are set
        up or hosts probed, until the next deadline otherwise."""
        if any(j.session is not None and not j.session.opened for j in self._running) or any(
                h.probe is not None for h in self._hosts.hosts()):
            return _OPENING_POLL_S
        now = time.monotonic()
        times = [j.session.kill_at - now for j in self._running
                 if j.session is not None and j.session.kill_at is not None]
        if self._running or self._pending:
            times += [h.retry_at - now for h in self._hosts.listed() if h.state == DOWN]
        if any(j.pidfd < 0 for j in self._running):
            times.append(_POLL_S)
        return max(0.0, min(times)) if times else None

    def _step(self) -> bool:
        """Look at every session and probe, start what can start (under the lock);
        whether a job ended."""
        ended = False
        now = time.monotonic()
        for job in list(self._running):
            session = job.session
            assert session is not None
            code = session.proc.poll()
            if code is not None:
                ended = self._session_ended(job, code) or ended
                continue
            if not session.opened and session.poll_open():
                host = self._hosts.get(session.host)
                host.opening -= 1
                host.up()
                job.drop_output()
            if session.kill_at is not None and now >= session.kill_at:
                session.kill_at = None
                session.kill(signal.SIGKILL)
        if self._running or self._pending:  # else nothing needs a host now
            first = self._pending[0] if self._pending else None
            self._hosts.check_probes(now, first.settings if first else _own(),
                                     first.python if first else "")
        return self._place() or ended

    def _session_ended(self, job: _Job, code: int) -> bool:
        """Job ``job``'s ssh client exited with ``code`` (under the lock): its slots are
        free; it is over, or, if its connection failed before the session opened, back
        in the queue. Whether it is over."""
        session = job.session
        assert session is not None
        host = self._hosts.get(session.host)
        was_open = session.opened
        opened = was_open or session.poll_open()  # (which sets session.opened)
        if not was_open:  # it was counted as opening until now, opened or not
            host.opening -= 1
        session.close()
        host.used -= job.slots
        self._running.remove(job)
        if job.pidfd >= 0:
            assert self._selector is not None
            self._selector.unregister(job.pidfd)
            os.close(job.pidfd)
            job.pidfd = -1
        if code == SSH_FAILED and not opened and job.cancel is None:
            reason = session.failure()
            self._hosts.went_down(host, reason, job.settings)
            _unlink(session.log_path)
            job.attempts += 1
            if job.attempts < _ATTEMPTS:
                job.session = None
                job.handle.host = ""
                self._pending.appendleft(job)
                return False
            return self._finish(job, JobStatus(JobState.FAILED, None,
                                               f"cannot reach ssh host {host.name}: {reason}"))
        status = session.status(code)
        if code == SSH_FAILED:
            self._hosts.went_down(host, status.reason, job.settings)
        _unlink(session.log_path)
        return self._finish(job, status)

    def _finish(self, job: _Job, status: JobStatus) -> bool:
        job.status = status
        job.drop_output()
        if job.log is not None and job.session is not None:
            _jobs.note_ended(job.log, status.exitcode, lost=status.state == JobState.LOST)
        return True

    def _place(self) -> bool:
        """Start every pending job a host has room for (under the lock); whether one
        could not start (it is over)."""
        failed = False
        for job in list(self._pending):
            host = self._hosts.pick(job.slots, job.settings.max_startups, job.avoid)
            if host is None:
                continue
            self._pending.remove(job)
            try:
                self._start(job, host)
            except OSError as e:
                failed = self._finish(job, JobStatus(JobState.FAILED, None,
                                                     f"cannot start ssh: {e}"))
        return failed

    def _start(self, job: _Job, host: Host) -> None:
        log = os.path.join(self._log_dir, f"{job.handle.job_id}.ssh")
        command = remote_command(job.python, LOADER, str(len(keeper_source())))
        argv = [*ssh_base(job.settings, log), "--", host.name, command]
        data = launch_data(job.argv, job.env, job.pipe)
        job.session = Session(host.name, argv, data, log, job.out_w, job.err_w)
        host.used += job.slots
        host.opening += 1
        job.handle.host = host.name
        self._running.append(job)
        if job.log is not None:
            _jobs.note_started(job.log, host.name, job.session.pid)
        if hasattr(os, "pidfd_open") and self._selector is not None:
            try:
                job.pidfd = os.pidfd_open(job.session.pid)
                self._selector.register(job.pidfd, selectors.EVENT_READ)
            except OSError:
                job.pidfd = -1

    # -- status, cancel -------------------------------------------------------------------

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        """Each job's state: pending (no free slot yet, or its connection is being set
        up), running (its session is open), or how its ssh client ended."""
        out = {}
        with self._lock:
            for h in handles:
                job = self._jobs.get(h.job_id)
                if job is None:
                    out[h.job_id] = JobStatus(JobState.LOST, None, "unknown job")
                elif job.status is not None:
                    out[h.job_id] = job.status
                elif job.session is None:
                    out[h.job_id] = JobStatus(JobState.PENDING, None, "waiting for a slot")
                elif not job.session.opened:
                    out[h.job_id] = JobStatus(JobState.PENDING, None,
                                              f"connecting to {job.session.host}")
                else:
                    out[h.job_id] = JobStatus(JobState.RUNNING)
        return out

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        """SIGTERM (SIGKILL with ``force``) each job, through its keeper; a job still
        waiting for a slot is dropped."""
        sig = signal.SIGKILL if force else signal.SIGTERM
        ended = False
        with self._lock:
            for h in handles:
                job = self._jobs.get(h.job_id)
                if job is None or job.status is not None:
                    continue
                job.cancel = sig
                if job.session is None:
                    self._pending.remove(job)
                    ended = self._finish(job, JobStatus(JobState.CANCELLED, -sig,
                                                        "cancelled before it started"))
                else:
                    job.session.ask(force, _KILL_GRACE_S)
        self._wake()
        if ended:
            self.watcher().wake()

    def release(self, handle: JobHandle) -> None:
        """Forget a finished job."""
        with self._lock:
            job = self._jobs.get(handle.job_id)
            if job is not None and job.status is not None:
                del self._jobs[handle.job_id]

    def listen_host(self) -> str:
        """``listen_host`` if set, else this machine's address on the route to the first
        host (its address as ``ssh -G`` resolves it: ssh_config's ``HostName``).

        Raises:
            BackendError: no hosts are configured, or no route leads to the first.
        """
        cfg = get_config()
        if cfg.listen_host:
            return cfg.listen_host
        own = _own(cfg)
        listed = own.host_list()
        if not listed:
            raise BackendError("the ssh backend has no hosts: set ssh_hosts "
                               "(FIBER_SSH_HOSTS=node1:8,node2:8)")
        name = listed[0][0]
        if name not in self._listen:
            self._listen[name] = self._route_to_host(own, name)
        return self._listen[name]

    @staticmethod
    def _route_to_host(own: SshSettings, name: str) -> str:
        address, proxy = name.rsplit("@", 1)[-1], ""
        try:
            cp = subprocess.run([*ssh_base(own), "-G", "--", name], capture_output=True,
                                text=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError) as e:
            raise BackendError(f"cannot run `ssh -G {name}` ({e}): the ssh backend needs the "
                               "OpenSSH client (ssh) on PATH") from None
        if cp.returncode != 0:
            raise BackendError(f"`ssh -G {name}` failed (exit {cp.returncode}): "
                               f"{cp.stderr.strip()}") from None
        for line in cp.stdout.splitlines():
            key, _, value = line.partition(" ")
            if key == "hostname":
                address = value.strip()
            elif key in ("proxyjump", "proxycommand") and value.strip() != "none":
                proxy = f"{key} {value.strip()}"
        what = f"ssh host {name!r}" + (f" (HostName {address!r})" if address != name else "")
        if proxy:  # reached through another host: its network need not be ours
            try:
                return route_to(address)
            except OSError:
                raise BackendError(f"{what} is reached through a proxy ({proxy}), and this "
                                   "machine has no route of its own to it; set listen_host "
                                   "(FIBER_LISTEN_HOST) to this machine's address that the "
                                   "hosts reach") from None
        return route_toward(address, what, "check ssh_hosts (FIBER_SSH_HOSTS), or give it a "
                            "HostName in your ssh config (ssh_config)", "the hosts")

    def check_hosts(self) -> List[Tuple[str, int, int, str]]:
        """Try every host of ``ssh_hosts`` that is not known to be up now (ssh, and fiber
        in its Python), then say what each is: ``(host, slots, slots in use, state)``,
        the state ``up``, ``down: <why>`` or ``new`` (not tried)."""
        own = _own()
        with self._lock:
            self._hosts.update(own.host_list())
            self._start_thread()
        python = own.python or get_config().python or sys.executable
        self._hosts.contact(own, python, self._lock, down_too=True)
        with self._lock:
            return [(h.name, h.slots, h.used, h.state + (f": {h.reason}" if h.reason else ""))
                    for h in self._hosts.listed()]

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        """The ssh programs running on this machine and the jobs they started whose logs
        are kept here (``fiber ps``)."""
        return _jobs.find_jobs(program)

    def remove_jobs(self, program: str = "", job_ids: Sequence[str] = ()) -> List[str]:
        """SIGTERM a program's main process and the ssh clients of its running jobs, or
        of the jobs named (``fiber stop``): a job's keeper kills it when its session
        ends."""
        return _jobs.remove_jobs(program, job_ids)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        """The output of a job started from this machine, as its log has it
        (``fiber logs``).

        Raises:
            BackendError: no log of that job is kept on this machine.
        """
        return _jobs.read_log(job_id, tail)

    # -- the end ---------------------------------------------------------------------------

    def _at_exit(self) -> None:
        """The program ends: jobs still waiting never start, those still running are
        killed (their lifelines would end them anyway), then the thread ends."""
        with self._lock:
            for job in list(self._pending):
                self._pending.remove(job)
                self._finish(job, JobStatus(JobState.CANCELLED, None, "the program ended"))
            for job in self._running:
                if job.session is not None:
                    job.cancel = signal.SIGKILL
                    job.session.ask(True, 0.0)
        self._wake()
        deadline = time.monotonic() + _EXIT_WAIT_S
        while time.monotonic() < deadline:
            with self._lock:
                if not self._running:
                    break
            time.sleep(0.02)
        with self._lock:
            for job in self._running:
                if job.session is not None:
                    job.session.kill(signal.SIGKILL)
            self._stopped = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for job in self._running:
            if job.session is not None:
                _unlink(job.session.log_path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
