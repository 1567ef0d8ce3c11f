"""The ``docker`` backend: every fiber process is a container on a Docker engine (the
Docker SDK for Python, the extra ``docker``), labelled with its program; status is one
``containers.list`` a poll. Containers, PIDs, resources, networking, files and cleanup:
docs/backends/docker.md, "Details"."""

from __future__ import annotations

import codecs
import dataclasses
import datetime
import functools
import socket
import sys
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ..._log import log
from ..._process_state import here
from ...config import Config, get_config, settings
from ...errors import BackendError, ConfigError, SubmitError
from .._base import JobHandle, JobInfo, JobSpec, JobState, JobStatus
from .._common import PARALLEL, parallel
from .._labelled import LabelledBackend, TrackedJob
from ._settings import DockerSettings
from ._util import (
    client_kwargs,
    docker_sdk,
    engine_reason,
    exit_status,
    is_conflict,
    is_not_found,
    own_container_id,
    parse_mounts,
    without_tini,
)

__all__ = ["DockerBackend", "exit_status", "parse_mounts", "own_container_id",
           "LABEL_PROGRAM", "LABEL_JOB", "LABEL_NAME"]

LABEL_PROGRAM = "fiber.program"
LABEL_JOB = "fiber.job"
LABEL_NAME = "fiber.name"
LABEL_MASTER = "fiber.master"
#: Environment variable through which fiber processes in containers inherit the program id.
PROGRAM_ENV = "FIBER_DOCKER_PROGRAM"
#: Where a ``fiber run`` main program finds the engine's socket in its container.
MAIN_ENGINE_SOCKET = "/run/fiber-docker.sock"
_MAIN_ENV = "FIBER_DOCKER_MAIN_SOCKET"  # the host's socket to mount there

_LOG_TAIL = 1000  # lines of each exited container's output kept for logs()
_LOG_BYTES = 256 * 1024
_EXIT_TIMEOUT = 10.0  # seconds per engine call while the master exits


# -- the backend --------------------------------------------------------------------------


def _own(cfg: Optional[Config] = None) -> DockerSettings:
    """The docker backend's settings in ``cfg`` (or the config in force)."""
    return settings(DockerSettings, "docker", cfg)


@dataclasses.dataclass
class _Job(TrackedJob):
    engine: str = ""
    container_id: str = ""
    pid: Optional[int] = None


class _Engine:
    """One engine's API client (created on first use, reused by every thread)."""

    def __init__(self, url: str, client: Any) -> None:
        self.url = url
        self.api = client
        self.own: Optional[Dict[str, Any]] = None
        self.own_checked = False


class DockerBackend(LabelledBackend[_Job, bytes]):
    """Run every job as a container on a Docker engine."""

    name = "docker"
    settings = DockerSettings

    def __init__(self) -> None:
        # The program's id (``fiber.program`` label) is inherited by fiber processes in the
        # containers, so that the master's status query and exit hook also see the
        # containers its children started (processes in containers end with ``os._exit``:
        # no exit hook of theirs runs).
        super().__init__(PROGRAM_ENV)
        self._engines: Dict[Tuple[str, float], _Engine] = {}

    # -- the engine ---------------------------------------------------------------------

    def _engine(self, cfg: Optional[Config] = None) -> _Engine:
        """The client of the configured engine; SubmitError when it cannot be reached."""
        cfg = cfg or get_config()
        if _own(cfg).timeout <= 0:
            raise ConfigError("docker_timeout", f"must be positive, got {_own(cfg).timeout!r}")
        docker = docker_sdk()
        url, kwargs = client_kwargs(cfg)
        key = (url, _own(cfg).timeout)
        with self._lock:
            engine = self._engines.get(key)
        if engine is not None:
            return engine
        try:
            # version="auto" asks the engine its API version: an unreachable one fails here
            client = docker.APIClient(version="auto", timeout=_own(cfg).timeout,
                                      max_pool_size=PARALLEL + 2, **kwargs)
        except Exception as e:
            raise SubmitError(f"cannot reach the Docker engine at {url}: {engine_reason(e)}") from e
        with self._lock:
            engine = self._engines.setdefault(key, _Engine(url, client))
        return engine

    def _own_container(self, engine: _Engine) -> Optional[Dict[str, Any]]:
        """``inspect`` of the container this master runs in, when it is on this engine."""
        if not engine.own_checked:
            cid = own_container_id()
            info = None
            if cid is not None:
                try:
                    info = engine.api.inspect_container(cid)
                except Exception as e:  # another engine's container, or none
                    log("docker: own container %s not on %s: %s", cid[:12], engine.url, e)
            engine.own, engine.own_checked = info, True
        return engine.own

    def _network(self, engine: Optional[_Engine], cfg: Config) -> str:
        if _own(cfg).network:
            return _own(cfg).network
        own = self._own_container(engine) if engine is not None else None
        if own is not None:
            mode = str(own.get("HostConfig", {}).get("NetworkMode") or "default")
            return "bridge" if mode == "default" else mode
        return "bridge"

    def listen_host(self) -> str:
        cfg = get_config()
        if _own(cfg).network == "host" or _own(cfg).network.startswith("container:"):
            return "127.0.0.1"
        engine = self._engine(cfg)
        network = self._network(engine, cfg)
        if network == "host" or network.startswith("container:"):
            return "127.0.0.1"
        if network == "none":
            raise BackendError("docker_network 'none' leaves jobs no way to reach the master")
        own = self._own_container(engine)
        try:
            if own is not None:  # the master's own address on that network
                nets = own.get("NetworkSettings", {}).get("Networks") or {}
                ip = (nets.get(network) or {}).get("IPAddress")
                if ip:
                    return str(ip)
            info = engine.api.inspect_network(network)
            for pool in (info.get("IPAM") or {}).get("Config") or []:
                gateway = str(pool.get("Gateway") or "").split("/")[0]
                if gateway and ":" not in gateway:
                    return gateway
        except Exception as e:  # listen_host would not help: jobs need that network too
            fix = " (check docker_network, FIBER_DOCKER_NETWORK)" if is_not_found(e) else ""
            raise SubmitError(f"cannot find the gateway of Docker network {network!r} on "
                              f"{engine.url}: {engine_reason(e)}{fix}") from e
        raise SubmitError(f"Docker network {network!r} on {engine.url} has no IPv4 gateway; "
                          "set listen_host to an address of this host that its containers "
                          "can reach")

    # -- submit ---------------------------------------------------------------------------

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        if not specs:
            return []
        docker = docker_sdk()
        cfg = get_config()
        engine = self._engine(cfg)
        network = self._network(engine, cfg)
        binds = parse_mounts(_own(cfg).mounts)
        own = self._own_container(engine)
        self._register_atexit()
        jobs: List[_Job] = []
        creates: List[Dict[str, Any]] = []
        master = f"{socket.gethostname()}:{here.pid}"
        for spec in specs:
            job_id = self._new_job_id()
            image = spec.image or (str(own.get("Image") or "") if own is not None else "")
            if not image:
                raise SubmitError("the docker backend needs an image: set the config key "
                                  "`image` (FIBER_IMAGE), or run the master in a container "
                                  "of the engine (its image is then used)")
            own_image = own is not None and image in (own.get("Image"),
                                                      own.get("Config", {}).get("Image"))
            res = spec.resources
            memory_mb = int(res.memory_mb) if res.memory_mb else None
            try:
                host_config = engine.api.create_host_config(
                    init=not _own(cfg).pid_host,
                    pid_mode="host" if _own(cfg).pid_host else None,
                    network_mode=network,
                    binds=(binds + [f"{spec.env[_MAIN_ENV]}:{MAIN_ENGINE_SOCKET}:rw"]
                           if _MAIN_ENV in spec.env else binds) or None,
                    nano_cpus=int(round(res.cpu * 1e9)) if res.cpu else None,
                    mem_limit=memory_mb * 2**20 if memory_mb else None,
                    memswap_limit=memory_mb * 2**20 if memory_mb else None,
                    device_requests=[docker.types.DeviceRequest(
                        count=int(res.gpu), capabilities=[["gpu"]])] if res.gpu else None,
                )
            except Exception as e:  # the SDK refuses a setting for this engine's API
                raise SubmitError(f"cannot configure Docker job {job_id} ({spec.name}): "
                                  f"{engine_reason(e)}") from e
            # TINI_VERBOSITY=2: tini (--init) writes how the job ended (exit code or signal)
            env = {"PYTHONUNBUFFERED": "1", "TINI_VERBOSITY": "2", PROGRAM_ENV: self.program,
                   **spec.env}
            creates.append(dict(
                image=image, command=self._command(spec, cfg, own_image), name=job_id,
                environment=env, host_config=host_config, detach=True,
                labels={LABEL_PROGRAM: self.program, LABEL_JOB: job_id,
                        LABEL_NAME: spec.name[:255], LABEL_MASTER: master},
            ))
            jobs.append(_Job(job_id, spec.name, memory_mb, engine=engine.url))

        host_pids = _own(cfg).pid_host and engine.url.startswith(("unix:", "http+unix:"))

        def create_and_start(i: int) -> str:
            job = jobs[i]
            try:
                cid = str(engine.api.create_container(**creates[i])["Id"])
                job.container_id = cid
                engine.api.start(cid)
                if host_pids:  # the container's process is a process of this host
                    pid = engine.api.inspect_container(cid)["State"].get("Pid")
                    job.pid = int(pid) if pid else None
            except Exception as e:
                raise SubmitError(f"cannot start Docker job {job.job_id} ({job.name}) "
                                  f"from image {creates[i]['image']!r} on {engine.url}: "
                                  f"{engine_reason(e, creates[i]['image'])}") from e
            return cid

        results = parallel(create_and_start, range(len(jobs)))
        failed = [(job, err) for job, (_, err) in zip(jobs, results) if err is not None]
        if failed:
            parallel(lambda job: self._remove(engine, job.container_id or job.job_id), jobs)
            first = failed[0][1]
            more = f" ({len(failed)} of {len(jobs)} jobs failed)" if len(jobs) > 1 else ""
            if isinstance(first, SubmitError):
                raise SubmitError(f"{first}{more}") from first.__cause__
            raise SubmitError(f"cannot start Docker jobs{more}: {first}") from first
        self._add(jobs)
        handles = [JobHandle(job.job_id, self.name, host=job.container_id[:12], pid=job.pid)
                   for job in jobs]
        log("docker: started %d container(s) on %s (network %s)", len(jobs), engine.url,
            network)
        return handles

    def _command(self, spec: JobSpec, cfg: Config, own_image: bool) -> List[str]:
        argv = list(spec.command)
        if argv and not cfg.python and argv[0] == sys.executable:
            # the master's interpreter path means nothing in a foreign image
            if _own(cfg).python:
                argv[0] = _own(cfg).python
            elif not own_image:
                argv[0] = "python3"
        return argv

    def _remove(self, engine: _Engine, ref: str) -> bool:
        """Remove a container, killing it if it runs; whether it is gone."""
        try:
            engine.api.remove_container(ref, force=True, v=True)
        except Exception as e:
            if not is_not_found(e):
                log("docker: cannot remove container %s: %s", ref, engine_reason(e))
                return False
        return True

    # -- status ---------------------------------------------------------------------------

    def _engine_of(self, job: _Job) -> _Engine:
        with self._lock:
            for (url, _), engine in self._engines.items():
                if url == job.engine:
                    return engine
        raise BackendError(f"no client for Docker engine {job.engine}")  # pragma: no cover

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        out, queried = self._split(handles)
        live: Dict[str, List[_Job]] = {}
        for job in queried:
            live.setdefault(job.engine, []).append(job)
        for jobs in live.values():
            engine = self._engine_of(jobs[0])
            try:  # the one query for all of this master's containers
                listed = engine.api.containers(
                    all=True, filters={"label": f"{LABEL_PROGRAM}={self.program}"})
            except Exception as e:
                raise BackendError(f"cannot list containers on {engine.url}: "
                                   f"{engine_reason(e)}") from e
            by_job = {str((c.get("Labels") or {}).get(LABEL_JOB)): c for c in listed}
            exited = []
            for job in jobs:
                c = by_job.get(job.job_id)
                if c is None:
                    if job.final is None:  # not removed by us: someone else did
                        job.final = JobStatus(JobState.LOST, None,
                                              "its container was removed outside fiber")
                    out[job.job_id] = job.final
                elif c.get("State") in ("exited", "dead"):
                    exited.append(job)
                elif c.get("State") == "created":
                    out[job.job_id] = JobStatus(JobState.PENDING)
                else:  # running, paused, restarting, removing
                    out[job.job_id] = JobStatus(JobState.RUNNING)
            if exited:
                parallel(functools.partial(self._finish, engine), exited)
                for job in exited:
                    if job.final is not None:
                        out[job.job_id] = job.final
                    else:  # inspect failed (engine hiccup): exited, code unknown yet
                        out[job.job_id] = JobStatus(JobState.RUNNING)
        return out

    def _finish(self, engine: _Engine, job: _Job) -> None:
        """An exited container: read its exit code, keep its output, remove it."""
        with job.finishing:
            if job.final is None:
                self._read_exit(engine, job)

    def _read_exit(self, engine: _Engine, job: _Job) -> None:
        try:
            state = engine.api.inspect_container(job.container_id)["State"]
        except Exception as e:
            if is_not_found(e):
                job.final = JobStatus(JobState.LOST, None, "its container was removed "
                                      "outside fiber before its exit code was read")
            return
        try:
            out = engine.api.logs(job.container_id, stdout=True, stderr=True, tail=_LOG_TAIL)
        except Exception:
            out = b""
        self._keep_log(job.job_id, bytes(out[-_LOG_BYTES:]))
        status = exit_status(int(state.get("ExitCode") or 0), bool(state.get("OOMKilled")),
                             job.signalled, str(state.get("Error") or ""), job.memory_mb,
                             bytes(out[-4096:]))
        if status.exitcode in (126, 127) and out:  # the command itself could not run
            last = without_tini(out.decode("utf-8", "replace")).strip().splitlines()[-1:]
            status = dataclasses.replace(status, reason=f"{status.reason}: {last[0]}"
                                         if last else status.reason)
        log("docker: %s (%s) exited: %s", job.job_id, job.name, status.reason or "exit code 0")
        job.final = status  # before the removal: a concurrent status() must not call it lost
        self._remove(engine, job.container_id)

    def logs(self, handle: JobHandle, tail: Optional[int] = None) -> str:
        """A job's output (stdout and stderr): live while its container exists, else the
        last lines kept when it was removed ('' for a job whose output was not kept)."""
        job, kept = self._known(handle.job_id)
        if job is None:
            raise BackendError(f"unknown Docker job {handle.job_id}")
        if kept is None and job.final is None:
            engine = self._engine_of(job)
            try:
                kept = engine.api.logs(job.container_id, stdout=True, stderr=True,
                                       tail=tail if tail is not None else "all")
            except Exception as e:
                if not is_not_found(e):
                    raise BackendError(f"cannot read the logs of {handle.job_id}: "
                                       f"{engine_reason(e)}") from e
            kept = self._kept_log(handle.job_id, kept)  # removed meanwhile, output kept?
        text = without_tini((kept or b"").decode("utf-8", "replace"))
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-tail:]) if tail > 0 else ""
        return text

    # -- cancel and cleanup ---------------------------------------------------------------

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        sig, targets = self._mark_signalled(handles, force)

        def kill(job: _Job) -> None:
            try:
                self._engine_of(job).api.kill(job.container_id, signal=sig.name)
            except Exception as e:
                if not (is_not_found(e) or is_conflict(e)):  # gone, or not running
                    raise BackendError(f"cannot signal Docker job {job.job_id}: "
                                       f"{engine_reason(e)}") from e

        errors = [err for _, err in parallel(kill, targets) if err is not None]
        if errors:
            raise errors[0]

    def _remove_listed(self, program: str, wanted: Set[str],
                       at_exit: bool = False) -> List[str]:
        with self._lock:
            engines = list(self._engines.values())
        removed: List[str] = []
        for engine in engines or [self._engine()]:
            try:
                if at_exit:  # each engine call from now on
                    engine.api.timeout = min(float(engine.api.timeout), _EXIT_TIMEOUT)
                listed = engine.api.containers(all=True, filters={"label": _label(program)})
            except Exception as e:
                log("docker: cannot list containers on %s: %s", engine.url, engine_reason(e))
                continue
            ids = {str(c["Id"]): str((c.get("Labels") or {}).get(LABEL_JOB)) for c in listed}
            ids = {cid: job for cid, job in ids.items() if program or job in wanted}
            gone = parallel(functools.partial(self._remove, engine), list(ids))
            removed.extend(job for job, (ok, _) in zip(ids.values(), gone) if ok)
        return removed

    # -- the ``fiber`` command line -----------------------------------------------------

    def main_spec(self, spec: JobSpec) -> JobSpec:
        """A main program's container gets the engine's socket (only it, not the workers:
        access to the engine is root on its host), or the engine's URL when it is remote."""
        url, _ = client_kwargs(get_config())
        env = {**spec.env, "FIBER_DOCKER_HOST": url}
        scheme, _, path = url.partition("://")
        if scheme == "unix":
            env.update({"FIBER_DOCKER_HOST": f"unix://{MAIN_ENGINE_SOCKET}", _MAIN_ENV: path})
        return dataclasses.replace(spec, env=env)

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        engine = self._engine()
        try:
            listed = engine.api.containers(all=True, filters={"label": _label(program)})
        except Exception as e:
            raise BackendError(f"cannot list containers on {engine.url}: {engine_reason(e)}") from e
        out = []
        for c in sorted(listed, key=lambda c: int(c.get("Created") or 0)):
            labels = c.get("Labels") or {}
            created = datetime.datetime.fromtimestamp(int(c.get("Created") or 0),
                                                      datetime.timezone.utc)
            out.append(JobInfo(str(labels.get(LABEL_JOB)), str(labels.get(LABEL_PROGRAM)),
                               str(labels.get(LABEL_NAME, "")), str(c.get("Status") or ""),
                               created.isoformat(timespec="seconds"), str(c.get("Image")),
                               ended=c.get("State") in ("exited", "dead")))
        return out

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        if self._known(job_id)[0] is not None:  # this program's: its output was kept when
            return self.logs(JobHandle(job_id, self.name), tail)  # its container was removed
        engine = self._engine()
        try:
            out = engine.api.logs(job_id, stdout=True, stderr=True,
                                  tail=tail if tail is not None else "all")
        except Exception as e:
            raise BackendError(f"cannot read the logs of {job_id}: {engine_reason(e)}") from e
        return without_tini(bytes(out).decode("utf-8", "replace"))

    def follow(self, handle: JobHandle) -> Optional[Iterator[str]]:
        job, _ = self._known(handle.job_id)
        if job is None or job.final is not None:
            return None
        url, kwargs = client_kwargs(get_config())
        # its own client, without a read timeout: a job may print nothing for hours
        client = docker_sdk().APIClient(version=self._engine_of(job).api.api_version,
                                     timeout=None, **kwargs)

        def lines() -> Iterator[str]:
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            try:
                for chunk in client.logs(job.container_id, stdout=True, stderr=True,
                                         stream=True, follow=True):
                    yield without_tini(decoder.decode(chunk))
            except Exception as e:
                if not is_not_found(e):
                    raise BackendError(f"cannot follow the output of {job.job_id} on {url}: "
                                       f"{engine_reason(e)}") from e
            finally:
                client.close()

        return lines()


def _label(program: str) -> str:
    """The label filter of one program's containers, or of every fiber container."""
    return f"{LABEL_PROGRAM}={program}" if program else LABEL_PROGRAM
