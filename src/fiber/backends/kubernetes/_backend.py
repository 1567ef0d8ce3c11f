"""The ``kubernetes`` backend: every fiber process is a pod (the official Kubernetes
client, the extra ``kubernetes``), labelled with its program and owned by the master's
pod; status is a watch of the program's pods. Pods, resources, status, cancel,
networking and files: docs/backends/kubernetes.md, "Details"."""

from __future__ import annotations

import codecs
import dataclasses
import functools
import json
import os
import socket
import sys
import time
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from ..._log import log
from ..._process_state import here
from ...config import Config, get_config, settings
from ...errors import BackendError, SubmitError
from .._base import JobHandle, JobInfo, JobSpec, JobState, JobStatus
from .._common import import_extra, parallel, parse_mounts, route_toward
from .._labelled import LabelledBackend, TrackedJob
from ._cluster import Cluster, connect
from ._pods import (
    CONTAINER,
    POD_IP_ENV,
    api_reason,
    is_not_found,
    parse_claims,
    pod_manifest,
    pod_status,
    smallest_node_cpus,
)
from ._settings import KubernetesSettings
from ._watch import PodWatch, last_status

if TYPE_CHECKING:
    import types

__all__ = ["KubernetesBackend", "pod_manifest", "pod_status", "LABEL_PROGRAM", "LABEL_JOB"]

LABEL_PROGRAM = "fiber.program"
LABEL_JOB = "fiber.job"
ANNOTATION_NAME = "fiber.name"
ANNOTATION_MASTER = "fiber.master"
#: Environment through which processes in pods inherit the program id and know their pod.
PROGRAM_ENV = "FIBER_K8S_PROGRAM"

_LOG_TAIL = 1000  # lines of each ended pod's output kept for logs()
_EXIT_TIMEOUT = 10.0  # seconds per API call while the master exits
#: Seconds a pod may go unseen by a running watch after its creation before its job is
#: lost (its events come within milliseconds; one missed is a pod deleted at once).
_UNSEEN_GRACE = 60.0


def _own(cfg: Optional[Config] = None) -> KubernetesSettings:
    """The kubernetes backend's settings in ``cfg`` (or the config in force)."""
    return settings(KubernetesSettings, "kubernetes", cfg)


def _client() -> types.ModuleType:
    return import_extra("kubernetes", "kubernetes", "the Kubernetes Python client")


# -- the backend --------------------------------------------------------------------------


@dataclasses.dataclass
class _Job(TrackedJob):
    namespace: str = ""
    blocked_since: Optional[float] = None  # since when a pending pod waits on a person
    started: bool = False  # seen running
    submitted: float = dataclasses.field(default_factory=time.monotonic)


class KubernetesBackend(LabelledBackend[_Job, str]):
    """Run every job as a pod on a Kubernetes cluster."""

    name = "kubernetes"
    settings = KubernetesSettings

    def __init__(self) -> None:
        super().__init__(PROGRAM_ENV)
        self._clusters: Dict[Tuple[str, str, str], Cluster] = {}

    # -- the cluster ----------------------------------------------------------------------

    def _cluster(self, cfg: Optional[Config] = None) -> Cluster:
        """The API client of the configured cluster; SubmitError when it cannot be used."""
        cfg = cfg or get_config()
        key = (_own(cfg).kubeconfig, _own(cfg).pod_api_server,
               _own(cfg).namespace)
        with self._lock:
            cluster = self._clusters.get(key)
        if cluster is not None:
            return cluster
        cluster = connect(_own(cfg), _client())
        with self._lock:
            cluster = self._clusters.setdefault(key, cluster)
        return cluster

    def listen_host(self) -> str:
        pod_ip = os.environ.get(POD_IP_ENV, "")
        if pod_ip:
            return pod_ip
        cluster = self._cluster()
        if cluster.own is not None:
            ip = (cluster.own.get("status") or {}).get("podIP")
            if ip:
                return str(ip)
        return route_toward(cluster.host, f"the Kubernetes API server {cluster.host!r}",
                            "check the server of your kubeconfig (kubernetes_kubeconfig, "
                            "KUBECONFIG)", "pods")

    # -- submit ---------------------------------------------------------------------------

    def node_cpus(self) -> Optional[int]:
        """The CPUs allocatable on the cluster's smallest schedulable node (see
        `Backend.node_cpus`), if this process may list nodes: a service account often
        may not (RBAC), and then the pools keep a pod a worker unless they say."""
        try:
            cluster = self._cluster()
            if cluster.node_cpus is None:
                resp = cluster.api.list_node(_preload_content=False,
                                             _request_timeout=_own().timeout)
                cluster.node_cpus = smallest_node_cpus(json.loads(resp.data).get("items", []))
            return cluster.node_cpus
        except Exception as e:
            log("kubernetes: cannot list the nodes (their size chooses the workers a pool's "
                "pod holds): %s", api_reason(e))
            return None

    def job_time_limit(self) -> Optional[float]:
        """``kubernetes_active_deadline`` (None if 0): a pool renews its workers before
        it (see fiber.pool._renew); a worker the kubelet ends at it retires."""
        return float(_own().active_deadline) or None

    def submit(self, specs: Sequence[JobSpec]) -> List[JobHandle]:
        if not specs:
            return []
        cfg = get_config()
        cluster = self._cluster(cfg)
        self._watch(cluster, cfg)  # its list runs while the pods are created
        mounts = parse_mounts("kubernetes_mounts", _own(cfg).mounts)
        claims = parse_claims("kubernetes_volume_claims", _own(cfg).volume_claims)
        own = cluster.own
        own_container = ((own or {}).get("spec", {}).get("containers") or [{}])[0]
        owner = ({"name": own["metadata"]["name"], "uid": own["metadata"]["uid"]}
                 if own is not None else None)
        service_account = _own(cfg).service_account or str(
            (own or {}).get("spec", {}).get("serviceAccountName") or "")
        master = f"{socket.gethostname()}:{here.pid}"
        self._register_atexit()
        jobs: List[_Job] = []
        pods: List[Dict[str, Any]] = []
        for spec in specs:
            job_id = self._new_job_id()
            image = spec.image or str(own_container.get("image") or "")
            if not image:
                raise SubmitError("the kubernetes backend needs an image: set the config key "
                                  "`image` (FIBER_IMAGE), or run the master in a pod (its "
                                  "image is then used)")
            command = list(spec.command)
            if command and not cfg.python and command[0] == sys.executable and \
                    image != own_container.get("image"):
                command[0] = "python3"  # the master's interpreter path means nothing there
            memory_mb = int(spec.resources.memory_mb) if spec.resources.memory_mb else None
            pods.append(pod_manifest(
                spec, name=job_id, namespace=cluster.namespace, image=image, command=command,
                labels={LABEL_PROGRAM: self.program, LABEL_JOB: job_id,
                        "app.kubernetes.io/managed-by": "fiber"},
                annotations={ANNOTATION_NAME: spec.name, ANNOTATION_MASTER: master},
                env={"PYTHONUNBUFFERED": "1", PROGRAM_ENV: self.program, **spec.env},
                owner=owner, service_account=service_account,
                pull_policy=_own(cfg).image_pull_policy,
                cpu_limits=_own(cfg).cpu_limits, mounts=mounts,
                active_deadline=_own(cfg).active_deadline, claims=claims))
            jobs.append(_Job(job_id, spec.name, memory_mb, namespace=cluster.namespace))

        def create(i: int) -> None:
            try:
                cluster.api.create_namespaced_pod(cluster.namespace, pods[i],
                                                  _request_timeout=_own(cfg).timeout)
            except Exception as e:
                raise SubmitError(f"cannot create pod {jobs[i].job_id} ({jobs[i].name}) in "
                                  f"namespace {cluster.namespace!r}: {api_reason(e)}") from e

        results = parallel(create, range(len(jobs)))
        failed = [err for _, err in results if err is not None]
        if failed:
            parallel(lambda job: self._delete(cluster, job.job_id, 0, _own(cfg).timeout),
                     jobs)
            more = f" ({len(failed)} of {len(jobs)} pods failed)" if len(jobs) > 1 else ""
            raise SubmitError(f"{failed[0]}{more}") from failed[0].__cause__
        self._add(jobs)
        log("kubernetes: created %d pod(s) in %s", len(jobs), cluster.namespace)
        return [JobHandle(job.job_id, self.name, host=job.job_id) for job in jobs]

    def _delete(self, cluster: Cluster, name: str, grace: Optional[int],
                timeout: float) -> None:
        try:
            cluster.api.delete_namespaced_pod(name, cluster.namespace,
                                              grace_period_seconds=grace,
                                              propagation_policy="Background",
                                              _request_timeout=timeout)
        except Exception as e:
            if not is_not_found(e):
                raise BackendError(f"cannot delete pod {name}: {api_reason(e)}") from e

    # -- status ---------------------------------------------------------------------------

    def _watch(self, cluster: Cluster, cfg: Config) -> PodWatch:
        """The watch of this program's pods on ``cluster`` (started on first use, and
        again in a forked child, which has no thread of its parent's)."""
        wake = self.watcher().wake  # an end seen: the watcher asks for statuses at once
        with self._lock:
            watch = cluster.watch
            if watch is None or watch.pid != here.pid:
                watch = cluster.watch = PodWatch(
                    cluster.api, cluster.namespace, f"{LABEL_PROGRAM}={self.program}",
                    LABEL_JOB, _own(cfg).timeout, wake)
                watch.start()
        return watch

    def status(self, handles: Sequence[JobHandle]) -> Dict[str, JobStatus]:
        out, live = self._split(handles)
        if not live:
            return out
        cfg = get_config()
        cluster = self._cluster(cfg)
        watch = self._watch(cluster, cfg)
        synced = watch.wait_synced(_own(cfg).timeout)
        down_for, error = watch.down()
        if not synced or down_for > _own(cfg).timeout:
            raise BackendError(f"cannot watch pods in {cluster.namespace!r}: " + (
                error or f"no answer in {_own(cfg).timeout:g} s (kubernetes_timeout)"))
        now = time.monotonic()
        ended: List[Tuple[_Job, JobStatus]] = []
        for job in live:
            pod, deleted = watch.cache.lookup(job.job_id)
            if pod is None and not deleted and (down_for or now - job.submitted
                                                < _UNSEEN_GRACE):
                out[job.job_id] = JobStatus(JobState.PENDING)  # its events may be on the way
                continue
            blocked_for = now - job.blocked_since if job.blocked_since is not None else 0.0
            st, blocked = last_status(pod, deleted, signalled=job.signalled,
                                      memory_mb=job.memory_mb, blocked_for=blocked_for,
                                      pending_timeout=_own(cfg).pending_timeout)
            if blocked and job.blocked_since is None:
                job.blocked_since = now
                log("kubernetes: pod %s is blocked: %s", job.job_id, blocked)
            elif not blocked:
                job.blocked_since = None
            if st.state is JobState.RUNNING:
                job.started = True
            if st.state.finished:
                ended.append((job, st))
            out[job.job_id] = st
        if ended:
            parallel(lambda item: self._finish(cluster, cfg, *item), ended)
            for job, st in ended:
                out[job.job_id] = job.final or st
                watch.cache.forget(job.job_id)
        return out

    def _finish(self, cluster: Cluster, cfg: Config, job: _Job, st: JobStatus) -> None:
        """A pod that ended (or can never start): keep its output, record, delete it."""
        with job.finishing:
            if job.final is not None:
                return
            text = ""
            if st.state is not JobState.LOST and not st.reason.startswith("pod deleted"):
                try:
                    text = (cluster.api.read_namespaced_pod_log(
                        job.job_id, cluster.namespace, container=CONTAINER,
                        tail_lines=_LOG_TAIL, _request_timeout=_own(cfg).timeout)
                        or "")  # the client gives None for a pod that printed nothing
                except Exception:
                    text = ""
            self._keep_log(job.job_id, text)
            log("kubernetes: %s (%s) ended: %s", job.job_id, job.name,
                st.reason or "exit code 0")
            job.final = st  # before the deletion: a concurrent status() must not call it lost
            try:
                self._delete(cluster, job.job_id, 0, _own(cfg).timeout)
            except BackendError as e:
                log("kubernetes: %s", e)

    def logs(self, handle: JobHandle, tail: Optional[int] = None) -> str:
        """A job's output: live while its pod exists, else the last lines kept when it was
        deleted ('' for a job whose output was not kept)."""
        job, kept = self._known(handle.job_id)
        if job is None:
            raise BackendError(f"unknown Kubernetes job {handle.job_id}")
        if kept is None:
            cfg = get_config()
            cluster = self._cluster(cfg)
            try:
                kwargs = {"tail_lines": tail} if tail is not None else {}
                kept = (cluster.api.read_namespaced_pod_log(
                    job.job_id, job.namespace, container=CONTAINER,
                    _request_timeout=_own(cfg).timeout, **kwargs) or "")
            except Exception as e:
                if not is_not_found(e) and getattr(e, "status", None) != 400:
                    raise BackendError(f"cannot read the logs of {handle.job_id}: "
                                       f"{api_reason(e)}") from e
            kept = self._kept_log(handle.job_id, kept)  # deleted meanwhile, output kept?
        text = kept or ""
        if tail is not None:
            text = "".join(text.splitlines(keepends=True)[-tail:]) if tail > 0 else ""
        return text

    # -- cancel and cleanup ---------------------------------------------------------------

    def cancel(self, handles: Sequence[JobHandle], force: bool = False) -> None:
        _, targets = self._mark_signalled(handles, force)
        if not targets:
            return
        cfg = get_config()
        cluster = self._cluster(cfg)

        def delete(job: _Job) -> None:
            # a pod not seen running yet has nothing to end gracefully: delete it at once
            grace = 0 if force or not job.started else None
            self._delete(cluster, job.job_id, grace, _own(cfg).timeout)

        errors = [err for _, err in parallel(delete, targets) if err is not None]
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Stop the job watcher and the watches of pods, and close the API clients (a
        later call starts them again); the pods are not touched."""
        super().close()
        with self._lock:
            clusters = list(self._clusters.values())
            self._clusters.clear()
        for cluster in clusters:
            if cluster.watch is not None:
                cluster.watch.stop()
            cluster.api.api_client.close()

    def remove_all(self) -> None:
        with self._lock:  # at the master's exit: its watches end first (no new one starts)
            watches = [c.watch for c in self._clusters.values() if c.watch is not None]
        for watch in watches:
            watch.stop()
        super().remove_all()

    def _remove_listed(self, program: str, wanted: Set[str],
                       at_exit: bool = False) -> List[str]:
        timeout = _own().timeout
        if at_exit:
            timeout = min(timeout, _EXIT_TIMEOUT)
        with self._lock:
            clusters = list(self._clusters.values()) or [self._cluster()]
        removed: List[str] = []
        for cluster in clusters:
            # list + delete (not deletecollection): the verbs of deploy/rbac.yaml suffice
            try:
                names = [p["metadata"]["name"] for p in self._list(cluster, program, timeout)]
            except Exception as e:
                log("kubernetes: cannot list the pods of %s: %s", program or "fiber",
                    api_reason(e))
                continue
            names = [n for n in names if program or n in wanted]
            delete = functools.partial(self._delete, cluster, grace=0, timeout=timeout)
            for name, (_, err) in zip(names, parallel(delete, names)):
                if err is None:
                    removed.append(name)
                else:
                    log("kubernetes: %s", err)
        return removed

    def _list(self, cluster: Cluster, program: str, timeout: float) -> List[Dict[str, Any]]:
        """The pods (JSON) of one program, or every fiber pod, in the cluster's namespace."""
        resp = cluster.api.list_namespaced_pod(
            cluster.namespace, _preload_content=False, _request_timeout=timeout,
            label_selector=f"{LABEL_PROGRAM}={program}" if program else LABEL_PROGRAM)
        return list(json.loads(resp.data).get("items") or [])

    # -- the ``fiber`` command line -----------------------------------------------------

    def volume_settings(self, volumes: Sequence[str]) -> Dict[str, str]:
        """``fiber run -v CLAIM``: the claims added to ``kubernetes_volume_claims``, so
        that the program's pod and every pod it starts mount them (at ``/persistent``
        unless a path is given), as the original fiber's pods inherited their master's.

        Raises:
            fiber.errors.ConfigError: a volume is not ``claim[:pod_path][:ro]``.
        """
        for volume in volumes:
            parse_claims("--volume", volume)
        current = _own().volume_claims
        return {"kubernetes_volume_claims": ",".join(
            [v for v in (current, *volumes) if v.strip()])}

    def find_jobs(self, program: str = "") -> List[JobInfo]:
        cfg = get_config()
        cluster = self._cluster(cfg)
        try:
            pods = self._list(cluster, program, _own(cfg).timeout)
        except Exception as e:
            raise BackendError(f"cannot list pods in {cluster.namespace!r}: "
                               f"{api_reason(e)}") from e
        out = []
        for p in pods:
            meta, labels = p["metadata"], p["metadata"].get("labels") or {}
            status, blocked = pod_status(p)
            phase = str((p.get("status") or {}).get("phase") or "Unknown")
            why = blocked or status.reason
            state = f"{phase}: {why}" if why else phase
            containers = (p.get("spec") or {}).get("containers") or [{}]
            out.append(JobInfo(meta["name"], str(labels.get(LABEL_PROGRAM, "")),
                               str((meta.get("annotations") or {}).get(ANNOTATION_NAME, "")),
                               state, str(meta.get("creationTimestamp") or ""),
                               str(containers[0].get("image") or ""),
                               ended=phase in ("Succeeded", "Failed")))
        return sorted(out, key=lambda j: j.created)

    def read_logs(self, job_id: str, tail: Optional[int] = None) -> str:
        if self._known(job_id)[0] is not None:  # this program's: its output was kept when
            return self.logs(JobHandle(job_id, self.name), tail)  # its pod was deleted
        cfg = get_config()
        cluster = self._cluster(cfg)
        try:
            kwargs = {"tail_lines": tail} if tail is not None else {}
            return str(cluster.api.read_namespaced_pod_log(
                job_id, cluster.namespace, container=CONTAINER,
                _request_timeout=_own(cfg).timeout, **kwargs) or "")
        except Exception as e:
            raise BackendError(f"cannot read the logs of {job_id}: {api_reason(e)}") from e

    def follow(self, handle: JobHandle) -> Optional[Iterator[str]]:
        job, _ = self._known(handle.job_id)
        if job is None or job.final is not None:
            return None
        cluster = self._cluster()

        def lines() -> Iterator[str]:
            # The log can be read once the container runs or has ended. Wait for that by
            # reading the pod itself: status() deletes an ended pod, keeping only the tail
            # of its output; it is asked only while the pod waits (it fails a pod that
            # cannot start).
            while not self._container_began(cluster, job):
                if self.status([handle])[handle.job_id].state.finished:
                    yield self.logs(handle)  # kept when its pod was deleted
                    return
                time.sleep(0.5)
            decoder = codecs.getincrementaldecoder("utf-8")("replace")
            try:  # no read timeout: a job may print nothing for hours
                resp = cluster.api.read_namespaced_pod_log(
                    job.job_id, job.namespace, container=CONTAINER, follow=True,
                    _preload_content=False)
                try:
                    for chunk in resp.stream(4096, decode_content=True):
                        yield decoder.decode(chunk)
                finally:
                    resp.release_conn()
            except Exception as e:
                if not is_not_found(e) and getattr(e, "status", None) != 400:
                    raise BackendError(f"cannot follow the output of {job.job_id}: "
                                       f"{api_reason(e)}") from e

        return lines()

    def _container_began(self, cluster: Cluster, job: _Job) -> bool:
        """Whether the job's container runs or has ended (False when that is unknown)."""
        try:
            resp = cluster.api.read_namespaced_pod(
                job.job_id, job.namespace, _preload_content=False,
                _request_timeout=_own().timeout)
            pod = json.loads(resp.data)
        except Exception:
            return False
        states = [cs.get("state") or {}
                  for cs in (pod.get("status") or {}).get("containerStatuses") or []]
        return any("running" in st or "terminated" in st for st in states)
